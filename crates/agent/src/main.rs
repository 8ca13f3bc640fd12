//! `breeze-agent`: the device agent's binary; everything lives in [`breeze_agent::cli`].

fn main() -> std::process::ExitCode {
    breeze_agent::cli::main_from(std::env::args_os())
}
