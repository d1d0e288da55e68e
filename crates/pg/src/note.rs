//! The payload of an active-active node's `<schema>_ready` notifications (ADR 0008, session 11).
//!
//! A payload is a comma-separated list of tokens. A token that is a job id announces that job
//! (put, made ready, kicked, released, swept back to ready). A token `@<ms>` right after an
//! id says that the job is delayed until `<ms>` by the database clock (Unix ms), so a
//! listener that leaves the job to its owner need not read the row only to learn its due time.
//!
//! **Mixed versions.** Nodes built before the due-time tokens parse every token as an id and
//! skip what does not parse, so they still see every id of a payload with `@` tokens and read
//! the rows as before; payloads without `@` tokens (old nodes, the claim and sweep statements)
//! are what they always were. The due time is only a hint for when to look: the listener
//! still reads the row (`get_free`) before adopting the job, and the claim by the database
//! clock stays the authority, so a wrong or stale hint can make a job late on that node, never
//! early.

use tickwheel_queue::JobId;

/// The longest payload sent: PostgreSQL refuses 8000 bytes or more.
pub(crate) const MAX_PAYLOAD: usize = 7900;

/// The payloads announcing `jobs` (`(id, Some(due))` for a delayed job, database clock), each
/// at most [`MAX_PAYLOAD`] bytes, in order; an id and its due time stay in one payload.
pub(crate) fn payloads(jobs: impl IntoIterator<Item = (i64, Option<i64>)>) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for (id, due) in jobs {
        let token = match due {
            Some(due) => format!("{id},@{due}"),
            None => id.to_string(),
        };
        if !cur.is_empty() && cur.len() + 1 + token.len() > MAX_PAYLOAD {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(',');
        }
        cur.push_str(&token);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The jobs a `<schema>_ready` payload announces, in order: each id with the due time (database
/// clock, Unix ms) that followed it, if any. Tokens that are neither an id nor a due time
/// after an id are skipped (a newer node's additions, or garbage).
pub fn parse_ready(payload: &str) -> Vec<(JobId, Option<u64>)> {
    let mut out: Vec<(JobId, Option<u64>)> = Vec::new();
    let mut last_was_id = false;
    for token in payload.split(',') {
        if let Some(due) = token.strip_prefix('@') {
            match (due.parse::<u64>(), out.last_mut()) {
                (Ok(due), Some(last)) if last_was_id => last.1 = Some(due),
                _ => {}
            }
            last_was_id = false;
        } else if let Ok(id) = token.parse::<JobId>() {
            out.push((id, None));
            last_was_id = true;
        } else {
            last_was_id = false;
        }
    }
    out
}

/// The check the `notify_payload` fuzz target runs on arbitrary bytes (read as text, as a
/// notification from another build or a damaged one might hold them): [`parse_ready`] must not
/// panic, and every job it yields (those whose numbers fit the encoder's `i64`) must come back
/// unchanged through [`payloads`] and [`parse_ready`], in payloads below the limit.
///
/// # Errors
///
/// A description of the first difference found.
#[doc(hidden)]
pub fn fuzz_check(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let parsed = parse_ready(&text);
    let jobs: Vec<(i64, Option<i64>)> = parsed
        .iter()
        .filter_map(|&(id, due)| {
            let id = i64::try_from(id).ok()?;
            let due = match due {
                Some(due) => Some(i64::try_from(due).ok()?),
                None => None,
            };
            Some((id, due))
        })
        .collect();
    let mut back = Vec::new();
    for p in payloads(jobs.iter().copied()) {
        if p.len() > MAX_PAYLOAD {
            return Err(format!("a payload of {} bytes", p.len()));
        }
        back.extend(parse_ready(&p));
    }
    let want: Vec<(JobId, Option<u64>)> = jobs
        .iter()
        .map(|&(id, due)| (id.unsigned_abs(), due.map(i64::unsigned_abs)))
        .collect();
    if back == want {
        Ok(())
    } else {
        Err(format!("parsed {want:?}, re-encoded and parsed {back:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_alone_parse_as_before() {
        assert_eq!(
            parse_ready("1,2,30"),
            vec![(1, None), (2, None), (30, None)]
        );
        assert_eq!(parse_ready(""), vec![]);
    }

    #[test]
    fn a_due_time_belongs_to_the_id_before_it() {
        assert_eq!(
            parse_ready("5,@1000,6,7,@2000"),
            vec![(5, Some(1000)), (6, None), (7, Some(2000))]
        );
    }

    #[test]
    fn stray_or_bad_tokens_are_skipped() {
        // A due time with no id before it, two in a row, junk, negative numbers.
        assert_eq!(
            parse_ready("@5,1,@x,2,@10,@20,zz,3,@-1,-4"),
            vec![(1, None), (2, Some(10)), (3, None)]
        );
    }

    /// What a node built before the due-time tokens does with a payload: every token parsed
    /// as an id, the rest skipped (cluster/mod.rs of that build). It must still see every id.
    fn old_parse(payload: &str) -> Vec<JobId> {
        payload
            .split(',')
            .filter_map(|id| id.parse::<JobId>().ok())
            .collect()
    }

    #[test]
    fn an_old_node_sees_every_id() {
        let jobs = [(1_i64, Some(5_i64)), (2, None), (3, Some(7))];
        let p = payloads(jobs);
        assert_eq!(old_parse(&p.concat()), vec![1, 2, 3]);
    }

    #[test]
    fn payloads_round_trip_and_stay_below_the_limit() {
        let jobs: Vec<(i64, Option<i64>)> = (0..2000_i64)
            .map(|i| {
                let id = (7 << 36) + i * 977;
                (id, (i % 3 != 0).then_some(1_764_000_000_000 + i))
            })
            .collect();
        let ps = payloads(jobs.clone());
        assert!(ps.len() > 1);
        let mut back = Vec::new();
        for p in &ps {
            assert!(p.len() <= MAX_PAYLOAD, "{}", p.len());
            back.extend(parse_ready(p));
        }
        let want: Vec<(JobId, Option<u64>)> = jobs
            .iter()
            .map(|&(id, due)| {
                let u = |v: i64| u64::try_from(v).expect("non-negative");
                (u(id), due.map(u))
            })
            .collect();
        assert_eq!(back, want);
        assert!(payloads(Vec::new()).is_empty());
    }

    #[test]
    fn the_fuzz_check_holds_for_odd_payloads() {
        for p in [
            "",
            "1,@2",
            "+5,@+6,7",
            "18446744073709551615,@1,2,@18446744073709551615",
            "@,,,@@1,\u{0}3",
            "9223372036854775807,@9223372036854775807",
        ] {
            assert_eq!(fuzz_check(p.as_bytes()), Ok(()), "{p:?}");
        }
        assert_eq!(fuzz_check(&[0xff, b',', b'4']), Ok(()));
    }
}
