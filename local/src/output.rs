//! Showing events: a progress bar, text lines, or JSON lines.

use std::io::Write;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use skipprd::pipeline::events::RunStamp;
use skipprd::pipeline::sync::SyncReport;
use skipprd::pipeline::{Event, Observer};

use crate::cli::OutputMode;

/// Write one line to standard output; a closed pipe (`| head`) is not an error.
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

/// The observer for a mode; JSON lines carry `stamp`'s fields. Every event also goes to the
/// log (at `info`: the daily log file keeps them, see [`crate::logfile`]).
pub fn observer(mode: OutputMode, stamp: &RunStamp) -> Box<dyn Observer> {
    let shown: Box<dyn Observer> = match mode {
        OutputMode::Json => Box::new(JsonLines(stamp.clone())),
        OutputMode::Text => Box::new(Text),
        OutputMode::Progress => Box::new(Progress::default()),
    };
    Box::new(Logged {
        stamp: stamp.clone(),
        shown,
    })
}

/// The `tracing` target events are logged under (the log file keeps them; standard error
/// leaves them to the observer).
pub const EVENT_TARGET: &str = "skipprd::event";

/// One JSON object per event on standard output, stamped with its run.
pub struct JsonLines(pub RunStamp);

impl Observer for JsonLines {
    fn event(&mut self, event: &Event) {
        match self.0.json_line(event) {
            Ok(line) => emit(&line),
            Err(e) => tracing::error!(error = %e, "Could not encode an event."),
        }
    }
}

/// Logs each event (its stamped JSON at `info`), then shows it.
struct Logged {
    stamp: RunStamp,
    shown: Box<dyn Observer>,
}

impl Observer for Logged {
    fn event(&mut self, event: &Event) {
        // Encoded only when some layer keeps it (the log file is on).
        if tracing::enabled!(target: EVENT_TARGET, tracing::Level::INFO)
            && let Ok(line) = self.stamp.json_line(event)
        {
            tracing::info!(target: EVENT_TARGET, event = %line, "event");
        }
        self.shown.event(event);
    }
}

/// Plain lines for people and logs.
pub struct Text;

impl Observer for Text {
    fn event(&mut self, event: &Event) {
        if let Event::LeaseWaiting { .. } = event {
            // A notice while the command waits, not a result: standard error.
            if let Some(line) = describe(event) {
                eprintln!("{line}");
            }
            return;
        }
        if let Some(line) = describe(event) {
            emit(&line);
        }
    }
}

/// A live progress bar on standard error, then the same summary as [`Text`].
#[derive(Default)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Observer for Progress {
    fn event(&mut self, event: &Event) {
        match event {
            Event::DiscoverStart {
                bytes_total,
                pipeline,
                ..
            } => {
                let bar = ProgressBar::with_draw_target(*bytes_total, ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template(
                    "{prefix} [{elapsed_precise}] {wide_bar} {decimal_bytes}/{decimal_total_bytes} ({decimal_bytes_per_sec}, {eta}) {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                bar.set_prefix(format!("discover {pipeline}"));
                bar.enable_steady_tick(Duration::from_millis(200));
                self.bar = Some(bar);
            }
            Event::DiscoverProgress {
                records,
                deadletters,
                bytes,
                ..
            } => {
                if let Some(bar) = &self.bar {
                    bar.set_position(*bytes);
                    bar.set_message(format!("{records} records, {deadletters} rejected"));
                }
            }
            Event::SyncStart { pipeline, .. } => {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template(
                    "{prefix} [{elapsed_precise}] {wide_bar} {decimal_bytes}/{decimal_total_bytes} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                bar.set_prefix(format!("sync {pipeline}"));
                bar.enable_steady_tick(Duration::from_millis(200));
                self.bar = Some(bar);
                Text.event(event);
            }
            Event::SyncStatus {
                rows,
                batches,
                deadletters,
                bytes,
                bytes_total,
                ..
            } => {
                if let Some(bar) = &self.bar {
                    if let Some(total) = bytes_total {
                        bar.set_length(*total);
                    }
                    bar.set_position(*bytes);
                    bar.set_message(format!(
                        "{rows} rows, {batches} batches, {deadletters} rejected"
                    ));
                }
            }
            Event::DiscoverComplete { .. }
            | Event::DiscoverError { .. }
            | Event::SyncComplete { .. }
            | Event::SyncError { .. } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                Text.event(event);
            }
            other => Text.event(other),
        }
    }
}

fn describe(event: &Event) -> Option<String> {
    Some(match event {
        Event::DiscoverStart {
            pipeline,
            source,
            files,
            bytes_total,
            ..
        } => {
            let mut line = format!("Discovering pipeline '{pipeline}' from source '{source}'");
            if let (Some(files), Some(bytes)) = (files, bytes_total) {
                line.push_str(&format!(
                    " ({files} file{}, {})",
                    plural(*files),
                    human_bytes(*bytes)
                ));
            }
            line
        }
        Event::DiscoverProgress { .. } => return None,
        Event::NamespaceDiscovered {
            namespace,
            records,
            fields,
            ..
        } => {
            let mut text = format!(
                "\nnamespace {namespace} ({records} record{})",
                plural(*records)
            );
            for field in fields {
                text.push_str(&format!("\n  {field}"));
            }
            text
        }
        Event::DiscoverComplete {
            namespaces,
            records,
            deadletters,
            bytes,
            seconds,
            schema_path,
            ..
        } => format!(
            "\nSaved schema to {}: {namespaces} namespace{}, {records} record{}, {deadletters} rejected, {} in {seconds:.2} s",
            schema_path.display(),
            plural(*namespaces),
            plural(*records),
            human_bytes(*bytes)
        ),
        Event::DiscoverError { .. } => return None,
        Event::SyncStart {
            pipeline,
            source,
            committed_batches,
            recovered_truncated_bytes,
        } => {
            let mut line = format!(
                "Syncing pipeline '{pipeline}' from source '{source}' ({committed_batches} committed batch{} in the WAL",
                if *committed_batches == 1 { "" } else { "es" }
            );
            if *recovered_truncated_bytes > 0 {
                line.push_str(&format!(
                    "; recovery cut a torn tail of {recovered_truncated_bytes} bytes"
                ));
            }
            line.push(')');
            line
        }
        Event::SchemaEvolved {
            pipeline,
            version,
            changes,
        } => {
            format!(
                "Schema of '{pipeline}' evolved to version {version}: {}",
                changes.join("; ")
            )
        }
        Event::SyncComplete {
            pipeline,
            report:
                SyncReport {
                    files_failed,
                    rows,
                    batches,
                    bytes,
                    deadletters,
                    pending,
                    delivered,
                    seconds,
                    aws_requests,
                    ..
                },
        } => {
            let mut line = format!(
                "Synced '{pipeline}': {rows} row{} in {batches} batch{}, {deadletters} rejected, {} read in {seconds:.2} s",
                plural(*rows),
                if *batches == 1 { "" } else { "es" },
                human_bytes(*bytes)
            );
            if *files_failed > 0 {
                line.push_str(&format!("; {files_failed} file(s) could not be read (see the log; tried again next pass)"));
            }
            if *delivered > 0 {
                line.push_str(&format!(
                    "; {delivered} batch{} delivered to the destination",
                    if *delivered == 1 { "" } else { "es" }
                ));
            }
            if *pending > 0 {
                line.push_str(&format!("; {pending} batches not yet delivered"));
            }
            if !aws_requests.is_empty() {
                let calls: Vec<String> = aws_requests
                    .iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect();
                line.push_str(&format!("; AWS requests: {}", calls.join(", ")));
            }
            line
        }
        Event::MaintainComplete {
            pipeline,
            tables,
            snapshots_expired,
            files_compacted_from,
            files_compacted_to,
            files_deleted,
            bytes_freed,
            seconds,
        } => format!(
            "Maintained '{pipeline}': {tables} table{}, {snapshots_expired} snapshot{} expired, {files_compacted_from} small file{} compacted into {files_compacted_to}, {files_deleted} unreferenced file{} deleted ({} freed) in {seconds:.2} s",
            plural(*tables),
            plural(*snapshots_expired),
            plural(*files_compacted_from),
            plural(*files_deleted),
            human_bytes(*bytes_freed)
        ),
        Event::MetadataApplied {
            pipeline,
            changed,
            version,
            namespaces,
            schema_path,
        } => {
            if *changed {
                format!(
                    "Applied the schema to '{pipeline}': {namespaces} namespace{} saved in {} (version {})",
                    plural(*namespaces),
                    schema_path.display(),
                    version.map_or_else(|| "-".to_owned(), |v| v.to_string())
                )
            } else {
                format!(
                    "The saved schema of '{pipeline}' ({}) already holds everything in the file; nothing changed.",
                    schema_path.display()
                )
            }
        }
        Event::StoreReady {
            table,
            region,
            created: true,
        } => format!("Created DynamoDB table '{table}' (region {region}); it is active."),
        Event::StoreReady { table, region, .. } => {
            format!("DynamoDB table '{table}' (region {region}) already exists; left as it is.")
        }
        Event::LeaseWaiting {
            pipeline,
            holder,
            expires_in_ms,
            wait_ms,
        } => {
            let until = match expires_in_ms {
                Some(ms) if *ms >= 0 => {
                    format!("its lease expires in {:.1} s", *ms as f64 / 1000.0)
                }
                Some(ms) => format!(
                    "its lease expired {:.1} s ago by its clock",
                    -(*ms as f64) / 1000.0
                ),
                None => "held until that process ends".to_owned(),
            };
            format!(
                "Waiting for the writer lease of pipeline '{pipeline}', held by {holder} ({until}); giving up after {:.1} s.",
                *wait_ms as f64 / 1000.0
            )
        }
        Event::Reset { pipeline, report } => {
            let id = |v: Option<u64>| v.map_or("none".to_owned(), |v| format!("batch {v}"));
            let lead = if report.applied {
                format!("Reset pipeline '{pipeline}'. Cleared:")
            } else {
                format!(
                    "Would reset pipeline '{pipeline}' (nothing changed; add --yes to do it). It would clear:"
                )
            };
            format!(
                "{lead}\n  source position: {} (the next sync reads the source from its start; rows that landed are written again)\n  destination acknowledgement: {}\n  deadletter acknowledgement: {}\n  WAL: {} batch{} (next id was {})\n  landed in the tables: through batch {}\n  new id floor: {} (the next batch gets id {})",
                id(report.position_batch),
                id(report.acked),
                id(report.deadletters_acked),
                report.wal_batches,
                if report.wal_batches == 1 { "" } else { "es" },
                report.wal_next,
                report.landed,
                report.floor,
                report.floor + 1
            )
        }
        _ => return None,
    })
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Bytes in decimal units (MB = 10^6 B).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
