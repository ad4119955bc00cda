//! The `watershed` command-line program.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

/// Watershed: PDE/CFD field computations on CPUs and GPUs.
#[derive(Debug, Parser)]
#[command(name = "watershed", version, about, long_version = long_version())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the cases this build can run.
    List,
    /// Print this build and the devices it can use.
    Info,
}

fn long_version() -> &'static str {
    Box::leak(
        watershed_cases::build_summary()
            .trim_start_matches("watershed ")
            .to_string()
            .into_boxed_str(),
    )
}

/// Writes the command's output; I/O errors are returned, never a panic
/// (`println!` panics when stdout is a closed pipe, e.g. `| head -0`).
fn run(command: Command, out: &mut impl Write) -> std::io::Result<()> {
    match command {
        Command::List => {
            let cases = watershed_cases::registered_cases();
            if cases.is_empty() {
                writeln!(out, "No cases are registered in this build yet.")?;
            }
            for case in cases {
                writeln!(out, "{:<24} {}", case.name, case.description)?;
            }
        }
        Command::Info => writeln!(out, "{}", watershed_cases::build_summary())?,
    }
    out.flush()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    match run(cli.command, &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`watershed list | head -1`): nothing to say.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "watershed: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}
