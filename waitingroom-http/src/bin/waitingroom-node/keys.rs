//! `waitingroom-node keygen` and `gate-secret`: make a cluster key, and print the return-path
//! secret an origin's gate needs from it.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use waitingroom_http::crypto::Crypto;

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the private key (mode 0600: readable by its owner only, also when
    /// --force replaces an existing file).
    #[arg(long, short, value_name = "PATH")]
    out: PathBuf,
    /// Overwrite an existing file.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
pub struct GateSecretArgs {
    /// The cluster key file (as `run --key-file`).
    #[arg(long, value_name = "PATH")]
    key_file: PathBuf,
}

pub fn gate_secret(args: GateSecretArgs) -> anyhow::Result<()> {
    let crypto = Crypto::load(&args.key_file)?;
    println!("{}", crypto.gate_secret());
    Ok(())
}

pub fn keygen(args: KeygenArgs) -> anyhow::Result<()> {
    let crypto = Crypto::generate();
    write_private(&args.out, &crypto.to_pkcs8_pem(), args.force)?;
    eprintln!(
        "wrote the cluster key to {}; give every node the same file",
        args.out.display()
    );
    println!("{}", serde_json::to_string_pretty(&crypto.public_jwk())?);
    Ok(())
}

/// Writes a secret file readable by its owner only (mode 0600), also over an existing file with
/// `force`: then the text goes to a new file (created 0600) beside it, which replaces the old
/// one, so the old file's mode is never kept and no reader ever sees half a key.
pub(crate) fn write_private(path: &std::path::Path, text: &str, force: bool) -> anyhow::Result<()> {
    if !force {
        return create_private(path, text).with_context(|| {
            format!(
                "cannot create {} (use --force to overwrite)",
                path.display()
            )
        });
    }
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = create_private(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}

/// Creates `path` (it must not exist) with mode 0600 and writes `text` to it.
fn create_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}
