//! The `watershed` command-line program.

use clap::{Parser, Subcommand};
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::List => {
            let cases = watershed_cases::registered_cases();
            if cases.is_empty() {
                println!("No cases are registered in this build yet.");
            }
            for case in cases {
                println!("{:<24} {}", case.name, case.description);
            }
        }
        Command::Info => println!("{}", watershed_cases::build_summary()),
    }
    ExitCode::SUCCESS
}
