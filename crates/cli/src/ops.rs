//! The one-shot subcommands: put, peek, kick, delete, stats, tubes, pause, export, import,
//! migrate. Each prints text, or JSON with `--json`.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal, Read, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde_json::{json, Map, Value};
use tickwheel_proto::{Command, Reply};

use crate::args::{ExportArgs, ImportArgs, KickArgs, MigrateArgs, PeekArgs, PutArgs, StatsArgs};
use crate::conn::{describe, tube_name, unexpected, Connection, Yaml};
use crate::jobs::{self, Writer};
use crate::time::{delay_until, parse_duration, parse_instant, seconds_up};

/// Global options every subcommand gets.
pub(crate) struct Ctx {
    pub(crate) addr: String,
    pub(crate) json: bool,
    pub(crate) timeout: Duration,
}

impl Ctx {
    pub(crate) fn connect(&self) -> Result<Connection> {
        Connection::open(&self.addr, self.timeout)
    }

    fn connect_to(&self, addr: &str) -> Result<Connection> {
        Connection::open(addr, self.timeout)
    }
}

fn print_json(value: &Value) {
    println!("{value}");
}

/// A stats dictionary as a JSON object: integers and decimals as numbers, the rest strings.
pub(crate) fn yaml_to_json(map: &Yaml) -> Value {
    let mut out = Map::new();
    for (k, v) in map {
        let value = if let Ok(n) = v.parse::<u64>() {
            Value::from(n)
        } else if let Some(x) = v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && v.contains('.'))
        {
            Value::from(x)
        } else {
            Value::from(v.as_str())
        };
        out.insert(k.clone(), value);
    }
    Value::Object(out)
}

fn print_yaml(map: &Yaml) {
    let width = map.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in map {
        println!("{k:<width$}  {v}");
    }
}

pub(crate) fn put(ctx: &Ctx, args: PutArgs) -> Result<()> {
    let body = match (&args.body, &args.file) {
        (Some(text), _) => Bytes::from(text.clone().into_bytes()),
        (None, Some(path)) => {
            Bytes::from(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        (None, None) => {
            if io::stdin().is_terminal() {
                eprintln!("reading the body from standard input (end with Ctrl-D)");
            }
            let mut buf = Vec::new();
            io::stdin()
                .read_to_end(&mut buf)
                .context("reading standard input")?;
            Bytes::from(buf)
        }
    };
    let ttr = seconds_up(parse_duration(&args.ttr).context("--ttr")?)?;
    let delay = match (&args.delay, &args.at) {
        (Some(d), _) => seconds_up(parse_duration(d).context("--delay")?)?,
        (None, Some(at)) => delay_until(parse_instant(at)?, jiff::Timestamp::now())?,
        (None, None) => 0,
    };
    let tube = tube_name(&args.tube)?;
    let mut conn = ctx.connect()?;
    conn.use_tube(&tube)?;
    let reply = conn.call(&Command::Put {
        priority: args.pri,
        delay,
        ttr,
        body,
    })?;
    match reply {
        Reply::Inserted(id) => {
            if ctx.json {
                print_json(&json!({"id": id, "tube": args.tube, "delay": delay}));
            } else if delay > 0 {
                println!("inserted {id} into {} (ready in {delay} s)", args.tube);
            } else {
                println!("inserted {id} into {}", args.tube);
            }
            Ok(())
        }
        Reply::BuriedId(id) => bail!("the server buried job {id} at once (out of memory)"),
        other => bail!("put failed: {}", describe(&other)),
    }
}

pub(crate) fn peek(ctx: &Ctx, args: PeekArgs) -> Result<()> {
    let mut conn = ctx.connect()?;
    let command =
        match args.what.as_str() {
            "ready" | "delayed" | "buried" => {
                conn.use_tube(&tube_name(&args.tube)?)?;
                match args.what.as_str() {
                    "ready" => Command::PeekReady,
                    "delayed" => Command::PeekDelayed,
                    _ => Command::PeekBuried,
                }
            }
            id => Command::Peek(id.parse().with_context(|| {
                format!("{id:?} is neither a job id nor ready, delayed or buried")
            })?),
        };
    let (id, body) = match conn.call(&command)? {
        Reply::Found(id, body) => (id, body),
        Reply::NotFound => bail!("not found"),
        other => return Err(unexpected("peek", &other)),
    };
    if args.body_only {
        io::stdout().write_all(&body)?;
        return Ok(());
    }
    // The job's stats, if it still exists a moment later.
    let stats = conn.stats_of(&Command::StatsJob(id))?.unwrap_or_default();
    let (text, encoding) = jobs::encode_body(&body);
    if ctx.json {
        let mut value = json!({"id": id, "body": text, "encoding": encoding});
        if let Value::Object(map) = &mut value {
            map.insert("stats".into(), yaml_to_json(&stats));
        }
        print_json(&value);
    } else {
        print_yaml(&stats);
        match std::str::from_utf8(&body) {
            Ok(text) => println!("body ({} bytes):\n{text}", body.len()),
            Err(_) => println!("body ({} bytes, base64):\n{text}", body.len()),
        }
    }
    Ok(())
}

pub(crate) fn kick(ctx: &Ctx, args: KickArgs) -> Result<()> {
    let mut conn = ctx.connect()?;
    if let Some(id) = args.job {
        return match conn.call(&Command::KickJob(id))? {
            Reply::KickedJob => {
                if ctx.json {
                    print_json(&json!({"kicked": 1, "id": id}));
                } else {
                    println!("kicked job {id}");
                }
                Ok(())
            }
            Reply::NotFound => bail!("job {id} not found, or neither buried nor delayed"),
            other => Err(unexpected("kick-job", &other)),
        };
    }
    conn.use_tube(&tube_name(&args.tube)?)?;
    match conn.call(&Command::Kick(args.bound))? {
        Reply::Kicked(n) => {
            if ctx.json {
                print_json(&json!({"kicked": n, "tube": args.tube}));
            } else {
                println!("kicked {n} jobs in {}", args.tube);
            }
            Ok(())
        }
        other => Err(unexpected("kick", &other)),
    }
}

pub(crate) fn delete(ctx: &Ctx, ids: &[u64]) -> Result<()> {
    let mut conn = ctx.connect()?;
    for &id in ids {
        conn.send(&Command::Delete(id));
    }
    let mut missing = Vec::new();
    let mut deleted = Vec::new();
    for &id in ids {
        match conn.recv()? {
            Reply::Deleted => deleted.push(id),
            Reply::NotFound => missing.push(id),
            other => return Err(unexpected("delete", &other)),
        }
    }
    if ctx.json {
        print_json(&json!({"deleted": deleted, "not_found": missing}));
    } else {
        for id in &deleted {
            println!("deleted {id}");
        }
    }
    if !missing.is_empty() {
        bail!(
            "not found (or reserved by another client): {}",
            missing
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

pub(crate) fn stats(ctx: &Ctx, args: StatsArgs) -> Result<()> {
    let mut conn = ctx.connect()?;
    let map = match (&args.tube, args.job) {
        (Some(tube), _) => conn
            .stats_of(&Command::StatsTube(tube_name(tube)?))?
            .with_context(|| format!("no tube {tube:?}"))?,
        (None, Some(id)) => conn
            .stats_of(&Command::StatsJob(id))?
            .with_context(|| format!("no job {id}"))?,
        (None, None) => conn.stats()?,
    };
    if ctx.json {
        print_json(&yaml_to_json(&map));
    } else {
        print_yaml(&map);
    }
    Ok(())
}

/// The columns of `tubes` (keys of `stats-tube`).
const TUBE_COLUMNS: [(&str, &str); 7] = [
    ("ready", "current-jobs-ready"),
    ("urgent", "current-jobs-urgent"),
    ("delayed", "current-jobs-delayed"),
    ("reserved", "current-jobs-reserved"),
    ("buried", "current-jobs-buried"),
    ("waiting", "current-waiting"),
    ("paused", "pause-time-left"),
];

pub(crate) fn tubes(ctx: &Ctx) -> Result<()> {
    let mut conn = ctx.connect()?;
    let mut rows = Vec::new();
    for tube in conn.list_tubes()? {
        if let Some(stats) = conn.stats_of(&Command::StatsTube(tube_name(&tube)?))? {
            rows.push((tube, stats));
        }
    }
    if ctx.json {
        print_json(&Value::Array(
            rows.iter().map(|(_, s)| yaml_to_json(s)).collect(),
        ));
        return Ok(());
    }
    let width = rows.iter().map(|(t, _)| t.len()).max().unwrap_or(4).max(4);
    print!("{:<width$}", "tube");
    for (title, _) in TUBE_COLUMNS {
        print!(" {title:>9}");
    }
    println!();
    for (tube, stats) in &rows {
        print!("{tube:<width$}");
        for (_, key) in TUBE_COLUMNS {
            print!(" {:>9}", crate::conn::field(stats, key).unwrap_or("-"));
        }
        println!();
    }
    Ok(())
}

pub(crate) fn pause(ctx: &Ctx, tube: &str, duration: &str) -> Result<()> {
    let secs = seconds_up(parse_duration(duration)?)?;
    let mut conn = ctx.connect()?;
    match conn.call(&Command::PauseTube(tube_name(tube)?, secs))? {
        Reply::Paused => {
            if ctx.json {
                print_json(&json!({"tube": tube, "paused": secs}));
            } else {
                println!("paused {tube} for {secs} s");
            }
            Ok(())
        }
        Reply::NotFound => bail!("no tube {tube:?}"),
        other => Err(unexpected("pause-tube", &other)),
    }
}

pub(crate) fn export(ctx: &Ctx, args: ExportArgs) -> Result<()> {
    let mut conn = ctx.connect()?;
    let plan = jobs::plan(&mut conn, args.scan.max_id)?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    let counts = jobs::scan(
        &mut conn,
        &plan,
        &args.scan,
        |job| jobs::write_record(&mut out, &job),
        |_, _| {},
    )?;
    out.flush()?;
    drop(out);
    // The summary goes to stderr when the jobs go to stdout.
    let summary = counts.summary("exported");
    if args.output.is_some() {
        if ctx.json {
            print_json(&serde_json::to_value(&counts)?);
        } else {
            println!("{summary}");
        }
    } else {
        eprintln!("{summary}");
    }
    Ok(())
}

pub(crate) fn import(ctx: &Ctx, args: ImportArgs) -> Result<()> {
    let input: Box<dyn io::BufRead> = match &args.file {
        Some(path) if path.as_os_str() != "-" => Box::new(BufReader::new(
            File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
        _ => Box::new(BufReader::new(io::stdin().lock())),
    };
    let mut conn = ctx.connect()?;
    let mut writer = Writer::new(&mut conn);
    jobs::read_records(input, |job| writer.push(job))?;
    writer.flush()?;
    report(ctx, "imported", &writer)
}

fn report(ctx: &Ctx, verb: &str, writer: &Writer<'_>) -> Result<()> {
    for e in &writer.errors {
        eprintln!("error: {e}");
    }
    if ctx.json {
        print_json(&serde_json::to_value(&writer.counts)?);
    } else {
        println!("{}", writer.counts.summary(verb));
    }
    if writer.counts.failed > 0 {
        bail!("{} jobs were not {verb}", writer.counts.failed);
    }
    Ok(())
}

pub(crate) fn migrate(ctx: &Ctx, args: MigrateArgs) -> Result<()> {
    if args.from == args.to {
        bail!("--from and --to are the same server: every job would be doubled");
    }
    let mut source = ctx.connect_to(&args.from)?;
    let mut target = ctx.connect_to(&args.to)?;
    let plan = jobs::plan(&mut source, args.scan.max_id)?;
    let bar = jobs::progress_bar(plan.max_id, "migrating");
    let mut writer = Writer::new(&mut target);
    let scanned = jobs::scan(
        &mut source,
        &plan,
        &args.scan,
        |job| writer.push(job),
        |id, counts| {
            bar.set_position(id);
            bar.set_message(format!("{} jobs found", counts.total()));
        },
    );
    let flushed = scanned.and_then(|c| writer.flush().map(|()| c));
    bar.finish_and_clear();
    let scan_counts = flushed?;
    writer.counts.skipped_reserved = scan_counts.skipped_reserved;
    writer.counts.skipped_other_tubes = scan_counts.skipped_other_tubes;
    report(ctx, "copied", &writer)
}
