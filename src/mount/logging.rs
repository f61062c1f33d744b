//! What the program says: log lines (to a file or stderr, as text or JSON lines, with a panic
//! hook that logs) and an error with its causes in one line, as the command line, the daemon's
//! report to its parent and the log all say it.

use std::fs::OpenOptions;
use std::path::Path;

use anyhow::{Context, Result};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per event (colour only on a terminal).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// An error and its causes, each said once (a cause's text is often part of its parent's).
pub fn message(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// Log lines go to the file, or to stderr; colour only on a terminal, JSON lines on request.
pub(crate) fn init_logging(log_file: Option<&Path>, format: LogFormat) -> Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fuser=error"));
    // With RUST_LOG=debug each FUSE request's span ends with a line giving its duration.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE);
    let writer = match log_file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::sync::Mutex::new(file))
        }
        None => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
    };
    let ansi = log_file.is_none() && std::io::stderr().is_terminal();
    match format {
        LogFormat::Text => builder.with_ansi(ansi).with_writer(writer).init(),
        LogFormat::Json => builder.json().with_ansi(false).with_writer(writer).init(),
    }
    std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
    Ok(())
}
