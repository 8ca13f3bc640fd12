//! `breeze install-skill`: installs the `breeze-rmm` agent skill (SKILL.md and references/,
//! generated from this binary's registry, so locked to its version) where Claude Code
//! (`~/.claude/skills/`) and OpenClaw (`~/.openclaw/workspace/skills/`) look for skills, or
//! into a directory of one's choice.
//!
//! An existing skill directory is replaced only with `--force`. The files are written to a
//! temporary directory beside the destination and renamed into place, so an agent never reads
//! a half-written skill and a failed install leaves the old one as it was.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use breeze_tools::docs::{self, DocFile, SKILL_NAME};

/// Which agent to install for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Target {
    Claude,
    Openclaw,
    Both,
}

/// One agent a skill can be installed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    Claude,
    Openclaw,
}

impl Agent {
    fn label(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code",
            Agent::Openclaw => "OpenClaw",
        }
    }

    /// The agent's own directory under the home directory; its presence means it is installed.
    fn home_dir(self, home: &Path) -> PathBuf {
        match self {
            Agent::Claude => home.join(".claude"),
            Agent::Openclaw => home.join(".openclaw"),
        }
    }

    fn skills_dir(self, home: &Path) -> PathBuf {
        match self {
            Agent::Claude => self.home_dir(home).join("skills"),
            Agent::Openclaw => self.home_dir(home).join("workspace").join("skills"),
        }
    }

    fn restart_hint(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code: end the session and start a new one",
            Agent::Openclaw => "OpenClaw: run `openclaw gateway restart`",
        }
    }
}

/// Where to install, and for whom (`None`: a directory given with `--dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    agent: Option<Agent>,
    pub(crate) path: PathBuf,
}

/// The `install-skill` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct InstallSkillArgs {
    /// Install for this agent only (default: each of ~/.claude and ~/.openclaw that exists, or
    /// Claude Code when neither does).
    #[arg(long, value_enum, conflicts_with = "dir")]
    pub(crate) target: Option<Target>,
    /// Replace an existing skill directory.
    #[arg(long)]
    pub(crate) force: bool,
    /// Install into DIR/breeze-rmm/ instead of an agent's skills directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// Decides the destinations. Auto-detection (no `--target`, no `--dir`) installs for every
/// agent whose directory exists under `home`, and for Claude Code when none does (with a note
/// saying so).
pub(crate) fn plan(
    args: &InstallSkillArgs,
    home: Option<&Path>,
) -> anyhow::Result<(Vec<Destination>, Option<String>)> {
    if let Some(dir) = &args.dir {
        return Ok((
            vec![Destination {
                agent: None,
                path: dir.join(SKILL_NAME),
            }],
            None,
        ));
    }
    let home = home.context("HOME is not set: name a directory with --dir")?;
    let (agents, note) = match args.target {
        Some(Target::Claude) => (vec![Agent::Claude], None),
        Some(Target::Openclaw) => (vec![Agent::Openclaw], None),
        Some(Target::Both) => (vec![Agent::Claude, Agent::Openclaw], None),
        None => {
            let found: Vec<Agent> = [Agent::Claude, Agent::Openclaw]
                .into_iter()
                .filter(|a| a.home_dir(home).is_dir())
                .collect();
            if found.is_empty() {
                (
                    vec![Agent::Claude],
                    Some(format!(
                        "found neither {} nor {}: installing for Claude Code (use --target to choose)",
                        Agent::Claude.home_dir(home).display(),
                        Agent::Openclaw.home_dir(home).display()
                    )),
                )
            } else {
                (found, None)
            }
        }
    };
    let destinations = agents
        .into_iter()
        .map(|a| Destination {
            agent: Some(a),
            path: a.skills_dir(home).join(SKILL_NAME),
        })
        .collect();
    Ok((destinations, note))
}

/// Writes `files` as the directory `dest`: into a temporary sibling first, then renamed into
/// place. An existing `dest` is refused unless `force`, and then replaced whole (files the new
/// skill no longer has go with it).
pub(crate) fn install(files: &[DocFile], dest: &Path, force: bool) -> anyhow::Result<()> {
    // `symlink_metadata`: a dangling link at the destination is still something to refuse.
    let exists = dest.symlink_metadata().is_ok();
    if exists && !force {
        bail!(
            "{} already exists; re-run with --force to replace it",
            dest.display()
        );
    }
    let parent = dest
        .parent()
        .with_context(|| format!("{} has no parent directory", dest.display()))?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let pid = std::process::id();
    let staging = parent.join(format!(".{SKILL_NAME}.new-{pid}"));
    let old = parent.join(format!(".{SKILL_NAME}.old-{pid}"));
    let result = (|| {
        remove_any(&staging)?;
        for f in files {
            let path = staging.join(&f.path);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            std::fs::write(&path, &f.contents)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if exists {
            // Two renames: the old skill is out of the way for the shortest possible time, and
            // is put back if the new one cannot take its place.
            remove_any(&old)?;
            std::fs::rename(dest, &old)
                .with_context(|| format!("moving {} aside", dest.display()))?;
            if let Err(e) = std::fs::rename(&staging, dest) {
                let _ = std::fs::rename(&old, dest);
                return Err(e).with_context(|| format!("renaming into {}", dest.display()));
            }
            remove_any(&old)?;
        } else {
            std::fs::rename(&staging, dest)
                .with_context(|| format!("renaming into {}", dest.display()))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = remove_any(&staging);
    }
    result
}

/// Removes a file, link or directory tree if there is one.
fn remove_any(path: &Path) -> anyhow::Result<()> {
    match path.symlink_metadata() {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => {
            std::fs::remove_dir_all(path).with_context(|| format!("removing {}", path.display()))
        }
        Ok(_) => std::fs::remove_file(path).with_context(|| format!("removing {}", path.display())),
    }
}

/// Runs `breeze install-skill`; returns what to print.
pub(crate) fn run(args: &InstallSkillArgs, home: Option<&Path>) -> anyhow::Result<String> {
    let (destinations, note) = plan(args, home)?;
    // Refuse before writing anything, so `--target both` does not install half.
    if !args.force {
        for d in &destinations {
            if d.path.symlink_metadata().is_ok() {
                bail!(
                    "{} already exists; re-run with --force to replace it",
                    d.path.display()
                );
            }
        }
    }
    let files = docs::skill_files(&breeze_tools::all());
    let mut out = String::new();
    if let Some(note) = note {
        out.push_str(&format!("note: {note}\n"));
    }
    for d in &destinations {
        install(&files, &d.path, args.force)?;
        let whom = d
            .agent
            .map_or_else(String::new, |a| format!(" for {}", a.label()));
        out.push_str(&format!(
            "installed the {SKILL_NAME} skill (Breeze {}){whom} in {}:\n",
            docs::VERSION,
            d.path.display()
        ));
        for f in &files {
            out.push_str(&format!("  {}\n", f.path));
        }
    }
    out.push_str("Restart your agent so it loads the skill:\n");
    let mut agents: Vec<Agent> = destinations.iter().filter_map(|d| d.agent).collect();
    if agents.is_empty() {
        agents = vec![Agent::Claude, Agent::Openclaw];
    }
    for a in agents {
        out.push_str(&format!("  {}\n", a.restart_hint()));
    }
    out.push_str(&format!(
        "The skill is locked to Breeze {}: after upgrading Breeze, run `breeze install-skill --force`.\n",
        docs::VERSION
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(target: Option<Target>, force: bool, dir: Option<&Path>) -> InstallSkillArgs {
        InstallSkillArgs {
            target,
            force,
            dir: dir.map(Path::to_path_buf),
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn installs_into_a_directory_with_every_generated_file() {
        let tmp = tempfile::tempdir().unwrap();
        let out = run(&args(None, false, Some(tmp.path())), None).unwrap();
        let skill = tmp.path().join(SKILL_NAME);
        for f in docs::skill_files(&breeze_tools::all()) {
            assert_eq!(read(&skill.join(&f.path)), f.contents, "{}", f.path);
            assert!(out.contains(&f.path), "{out}");
        }
        assert!(read(&skill.join("SKILL.md")).contains(docs::VERSION));
        assert!(out.contains(&skill.display().to_string()), "{out}");
        assert!(out.contains("Restart your agent"), "{out}");
        // Nothing is left behind beside it.
        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![SKILL_NAME.to_owned()]);
    }

    #[test]
    fn refuses_to_overwrite_without_force_and_replaces_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        run(&args(None, false, Some(tmp.path())), None).unwrap();
        let skill = tmp.path().join(SKILL_NAME);
        std::fs::write(skill.join("SKILL.md"), "edited by hand").unwrap();
        std::fs::write(skill.join("references/stale.md"), "gone soon").unwrap();

        let err = run(&args(None, false, Some(tmp.path())), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&skill.display().to_string()), "{err}");
        assert!(err.contains("--force"), "{err}");
        assert_eq!(read(&skill.join("SKILL.md")), "edited by hand");

        run(&args(None, true, Some(tmp.path())), None).unwrap();
        assert!(read(&skill.join("SKILL.md")).starts_with("---\nname: breeze-rmm\n"));
        assert!(!skill.join("references/stale.md").exists());
        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![SKILL_NAME.to_owned()], "no staging left");
    }

    #[test]
    fn a_file_in_the_way_is_refused_too() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(SKILL_NAME), "not a directory").unwrap();
        assert!(run(&args(None, false, Some(tmp.path())), None).is_err());
        run(&args(None, true, Some(tmp.path())), None).unwrap();
        assert!(tmp.path().join(SKILL_NAME).join("SKILL.md").is_file());
    }

    #[test]
    fn both_targets_under_a_fake_home() {
        let home = tempfile::tempdir().unwrap();
        let out = run(&args(Some(Target::Both), false, None), Some(home.path())).unwrap();
        let claude = home.path().join(".claude/skills/breeze-rmm");
        let openclaw = home.path().join(".openclaw/workspace/skills/breeze-rmm");
        for dir in [&claude, &openclaw] {
            assert!(dir.join("SKILL.md").is_file(), "{}", dir.display());
            assert!(dir.join("references/footguns.md").is_file());
            assert!(out.contains(&dir.display().to_string()), "{out}");
        }
        assert!(out.contains("openclaw gateway restart") && out.contains("Claude Code"));
        // Both refused, and neither touched, when one exists.
        std::fs::remove_dir_all(&openclaw).unwrap();
        let err = run(&args(Some(Target::Both), false, None), Some(home.path())).unwrap_err();
        assert!(err.to_string().contains(".claude"), "{err}");
        assert!(!openclaw.exists(), "nothing installed after a refusal");
    }

    #[test]
    fn auto_detect_installs_where_agents_are() {
        // Neither agent: Claude Code, and a note that says so.
        let home = tempfile::tempdir().unwrap();
        let out = run(&args(None, false, None), Some(home.path())).unwrap();
        assert!(out.starts_with("note: found neither"), "{out}");
        assert!(
            home.path()
                .join(".claude/skills/breeze-rmm/SKILL.md")
                .is_file()
        );
        assert!(!home.path().join(".openclaw").exists());

        // Only OpenClaw: OpenClaw only.
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".openclaw")).unwrap();
        let out = run(&args(None, false, None), Some(home.path())).unwrap();
        assert!(!out.contains("note:"), "{out}");
        assert!(
            home.path()
                .join(".openclaw/workspace/skills/breeze-rmm/SKILL.md")
                .is_file()
        );
        assert!(!home.path().join(".claude").exists());

        // Both present: both.
        std::fs::create_dir(home.path().join(".claude")).unwrap();
        let (dests, _) = plan(&args(None, true, None), Some(home.path())).unwrap();
        assert_eq!(dests.len(), 2);
    }

    #[test]
    fn no_home_needs_a_directory() {
        let err = run(&args(None, false, None), None).unwrap_err().to_string();
        assert!(err.contains("--dir"), "{err}");
    }
}
