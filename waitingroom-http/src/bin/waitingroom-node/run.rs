//! `waitingroom-node run`: one node, with its settings from flags, the environment and a file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use waitingroom_http::config::{self, Options};
use waitingroom_http::server;

use crate::{report, runtime};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML file with settings (keys as the flag names, with underscores).
    #[arg(long, short, env = "WAITINGROOM_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(flatten)]
    options: Options,
}

pub fn run(args: Box<RunArgs>) -> ExitCode {
    let args = *args;
    let file = match args.config.as_deref().map(config::read_file).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => {
            eprintln!("waitingroom-node: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = match config::merge(args.options, file).resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("waitingroom-node: {e}");
            return ExitCode::from(2);
        }
    };
    server::init_logging(cfg.log_format, &cfg.log_level);
    let result = runtime().and_then(|rt| rt.block_on(server::run(cfg)).map_err(Into::into));
    report(result)
}
