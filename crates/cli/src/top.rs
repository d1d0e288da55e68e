//! `tickwheel top`: a live terminal view of the server and its tubes (ratatui + crossterm).
//! Every interval it reads `stats`, `list-tubes` and `stats-tube` for each tube; rates are the
//! change of the cumulative counters between two refreshes. `q`, Esc or Ctrl-C quits.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};
use tickwheel_proto::Command;

use crate::conn::{field, number, tube_name, Connection, Yaml};
use crate::ops::Ctx;
use crate::time::parse_duration;

/// One reading of the server.
struct Snapshot {
    at: Instant,
    server: Yaml,
    tubes: Vec<(String, Yaml)>,
}

fn read(conn: &mut Connection) -> Result<Snapshot> {
    let server = conn.stats()?;
    let mut tubes = Vec::new();
    for tube in conn.list_tubes()? {
        if let Some(stats) = conn.stats_of(&Command::StatsTube(tube_name(&tube)?))? {
            tubes.push((tube, stats));
        }
    }
    Ok(Snapshot {
        at: Instant::now(),
        server,
        tubes,
    })
}

/// Per-second change of the sum of `keys` between two readings, `-` for the first.
fn per_second(old: Option<&Yaml>, new: &Yaml, keys: &[&str], seconds: f64) -> String {
    let (Some(old), true) = (old, seconds > 0.0) else {
        return "-".into();
    };
    let sum = |m: &Yaml| keys.iter().map(|k| number(m, k).unwrap_or(0)).sum::<u64>();
    let delta = sum(new).saturating_sub(sum(old));
    let r = delta as f64 / seconds;
    format!("{r:.1}")
}

struct View {
    addr: String,
    current: Option<Snapshot>,
    previous: Option<Snapshot>,
    error: Option<String>,
}

fn draw(frame: &mut Frame<'_>, view: &View) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let mut lines = Vec::new();
    match &view.current {
        Some(now) => {
            let s = &now.server;
            let get = |k: &str| field(s, k).unwrap_or("?").to_owned();
            let seconds = view
                .previous
                .as_ref()
                .map_or(0.0, |p| now.at.duration_since(p.at).as_secs_f64());
            let old = view.previous.as_ref().map(|p| &p.server);
            lines.push(Line::from(format!(
                "{}  version {}  uptime {} s  connections {}  tubes {}",
                view.addr,
                get("version"),
                get("uptime"),
                get("current-connections"),
                get("current-tubes"),
            )));
            lines.push(Line::from(format!(
                "jobs: ready {} (urgent {})  delayed {}  reserved {}  buried {}  total {}",
                get("current-jobs-ready"),
                get("current-jobs-urgent"),
                get("current-jobs-delayed"),
                get("current-jobs-reserved"),
                get("current-jobs-buried"),
                get("total-jobs"),
            )));
            lines.push(Line::from(format!(
                "rates/s: put {}  reserve {}  delete {}  timeouts {}",
                per_second(old, s, &["cmd-put"], seconds),
                per_second(
                    old,
                    s,
                    &["cmd-reserve", "cmd-reserve-with-timeout"],
                    seconds
                ),
                per_second(old, s, &["cmd-delete"], seconds),
                per_second(old, s, &["job-timeouts"], seconds),
            )));
        }
        None => lines.push(Line::from(format!("{}: connecting…", view.addr))),
    }
    if let Some(e) = &view.error {
        lines.push(Line::from(format!("error: {e}")));
    }
    frame.render_widget(Paragraph::new(lines), head);

    let header = Row::new([
        "TUBE", "READY", "URGENT", "DELAYED", "RESERVED", "BURIED", "WAITING", "WATCHING",
        "PAUSED", "PUT/S", "DELETE/S",
    ])
    .style(Style::default().add_modifier(Modifier::REVERSED));
    let mut rows = Vec::new();
    if let Some(now) = &view.current {
        let seconds = view
            .previous
            .as_ref()
            .map_or(0.0, |p| now.at.duration_since(p.at).as_secs_f64());
        let old: BTreeMap<&str, &Yaml> = view
            .previous
            .iter()
            .flat_map(|p| p.tubes.iter().map(|(t, y)| (t.as_str(), y)))
            .collect();
        for (tube, s) in &now.tubes {
            let get = |k: &str| field(s, k).unwrap_or("?").to_owned();
            let prev = old.get(tube.as_str()).copied();
            rows.push(Row::new([
                tube.clone(),
                get("current-jobs-ready"),
                get("current-jobs-urgent"),
                get("current-jobs-delayed"),
                get("current-jobs-reserved"),
                get("current-jobs-buried"),
                get("current-waiting"),
                get("current-watching"),
                get("pause-time-left"),
                per_second(prev, s, &["total-jobs"], seconds),
                per_second(prev, s, &["cmd-delete"], seconds),
            ]));
        }
    }
    let name_width = view
        .current
        .iter()
        .flat_map(|n| n.tubes.iter().map(|(t, _)| t.len()))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut widths = vec![Constraint::Length(
        u16::try_from(name_width).unwrap_or(u16::MAX),
    )];
    widths.extend([Constraint::Length(9); 10]);
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(" tubes "));
    frame.render_widget(table, body);
    frame.render_widget(
        Paragraph::new("q: quit   (refreshes every interval; rates over the last interval)"),
        foot,
    );
}

pub(crate) fn run(ctx: &Ctx, interval: &str) -> Result<()> {
    let interval = parse_duration(interval).context("--interval")?;
    let interval = interval.max(Duration::from_millis(100));
    let mut conn = ctx.connect()?;
    let mut terminal = ratatui::try_init().context("cannot open the terminal for top")?;
    let result = run_loop(&mut terminal, ctx, &mut conn, interval);
    ratatui::restore();
    result
}

fn run_loop(
    terminal: &mut DefaultTerminal,
    ctx: &Ctx,
    conn: &mut Connection,
    interval: Duration,
) -> Result<()> {
    let mut view = View {
        addr: ctx.addr.clone(),
        current: None,
        previous: None,
        error: None,
    };
    let mut broken = false;
    loop {
        if broken {
            match ctx.connect() {
                Ok(fresh) => {
                    *conn = fresh;
                    broken = false;
                }
                Err(e) => view.error = Some(format!("{e:#}")),
            }
        }
        if !broken {
            match read(conn) {
                Ok(snapshot) => {
                    view.previous = view.current.replace(snapshot);
                    view.error = None;
                }
                Err(e) => {
                    view.error = Some(format!("{e:#}"));
                    broken = true;
                }
            }
        }
        terminal.draw(|f| draw(f, &view))?;
        let deadline = Instant::now() + interval;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left)? {
                break;
            }
            if let Event::Key(key) = event::read()? {
                if key.kind != KeyEventKind::Press {
                    continue;
                }
                let ctrl_c =
                    key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
                if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                    return Ok(());
                }
            }
        }
    }
}
