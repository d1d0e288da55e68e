//! Medians and the result tables.

use crate::peers::Peer;

/// Median of a non-empty sample (mean of the middle two for even sizes).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// One row of a table.
pub(crate) enum Row {
    Measured { median: f64, runs: Vec<f64> },
    Skipped(String),
}

/// Prints one table: rows = implementations, the median, and the ratio to tickwheel.
pub(crate) fn print_table(title: &str, unit: &str, rows: &[(Peer, Row)]) {
    println!("{title}");
    let base = rows.iter().find_map(|(peer, row)| match (peer, row) {
        (Peer::Tickwheel, Row::Measured { median, .. }) => Some(*median),
        _ => None,
    });
    for (peer, row) in rows {
        match row {
            Row::Measured { median, runs } => {
                let ratio = match base {
                    Some(b) if *peer != Peer::Tickwheel && b > 0.0 => {
                        format!("({:.2}x tickwheel)", median / b)
                    }
                    _ => String::new(),
                };
                let runs: Vec<String> = runs.iter().map(|r| fmt_value(*r)).collect();
                println!(
                    "  {:<12} {:>9} {:<4} {:<20} runs: {}",
                    peer.name(),
                    fmt_value(*median),
                    unit,
                    ratio,
                    runs.join(", ")
                );
            }
            Row::Skipped(why) => println!("  {:<12} skipped: {why}", peer.name()),
        }
    }
}

fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// `1000000` as `1e6` when it is a power of ten, else with separators.
pub(crate) fn fmt_n(n: usize) -> String {
    let mut p = 1usize;
    let mut exp = 0;
    while p < n {
        p *= 10;
        exp += 1;
    }
    if p == n && exp >= 3 {
        return format!("1e{exp}");
    }
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
