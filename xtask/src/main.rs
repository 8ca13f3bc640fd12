//! `cargo xtask`: project automation that is not part of Breeze itself.
//!
//! - `cargo xtask tidy` checks repository conventions (also run by `cargo test`).

mod tidy;

fn main() -> anyhow::Result<()> {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("tidy") => tidy::run(),
        _ => {
            anyhow::bail!("usage: cargo xtask tidy");
        }
    }
}
