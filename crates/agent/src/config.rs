//! The agent's config file: where it is, what it holds, and how it is written.
//!
//! The file is JSON (`serverUrl`, `deviceId`, `orgId`, `siteId`, `token`, `config`,
//! `stateDir`, `patching`, `logWatches`), written atomically (temporary file, fsync, rename, fsync of the directory) with
//! mode 0600 in a directory with mode 0700. Reading a file that others may read logs a warning.
//! The token is never logged: `Debug` shows its prefix only.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use breeze_agent_proto::AgentConfig;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::AgentError;

/// The default config file for a root agent.
pub const SYSTEM_CONFIG_PATH: &str = "/etc/breeze-agent/agent.json";

/// The persisted identity and settings of an enrolled agent.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentFile {
    pub server_url: String,
    pub device_id: Uuid,
    pub org_id: Uuid,
    pub site_id: Uuid,
    pub token: String,
    #[serde(default)]
    pub config: AgentConfig,
    /// Where the command journal and temporary scripts live; defaults to `<config dir>/state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// The package manager patch commands use (default: the one installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patching: Option<crate::exec::patches::PatchingConfig>,
    /// Log files the agent tails, each matching line an event (see [`crate::logwatch`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_watches: Vec<crate::logwatch::LogWatch>,
}

impl fmt::Debug for AgentFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentFile")
            .field("server_url", &self.server_url)
            .field("device_id", &self.device_id)
            .field("org_id", &self.org_id)
            .field("site_id", &self.site_id)
            .field("token", &redact(&self.token))
            .field("config", &self.config)
            .field("state_dir", &self.state_dir)
            .field("patching", &self.patching)
            .field("log_watches", &self.log_watches)
            .finish()
    }
}

/// The first characters of a secret, enough to tell two apart in a log.
pub fn redact(secret: &str) -> String {
    let prefix: String = secret.chars().take(8).collect();
    format!("{prefix}…")
}

impl AgentFile {
    /// The state directory: the configured one, else `<dir of config_path>/state`.
    pub fn state_dir_for(&self, config_path: &Path) -> PathBuf {
        match &self.state_dir {
            Some(dir) => dir.clone(),
            None => config_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."))
                .join("state"),
        }
    }

    /// Reads and parses the config file, warning when its permissions are looser than 0600.
    pub fn load(path: &Path) -> Result<AgentFile, AgentError> {
        let bytes = std::fs::read(path).map_err(|e| AgentError::io("reading", path, e))?;
        warn_if_loose(path);
        serde_json::from_slice(&bytes).map_err(|e| AgentError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Writes the file atomically with mode 0600 (parent directory 0700).
    pub fn save(&self, path: &Path) -> Result<(), AgentError> {
        let mut json = serde_json::to_vec_pretty(self).map_err(|e| AgentError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        json.push(b'\n');
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_private_dir(parent)?;
        }
        write_atomic(path, &json, 0o600)
    }
}

#[cfg(unix)]
fn warn_if_loose(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{mode:o}"),
                "the agent config file is readable by others; it holds the device token (expected mode 600)"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_loose(_path: &Path) {}

/// Creates `dir` (and its parents) with mode 0700. An existing directory is left as it is
/// (it may be shared, like `/tmp`), with a warning when others can write to it.
pub fn create_private_dir(dir: &Path) -> Result<(), AgentError> {
    if dir.is_dir() {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(dir)
                && meta.permissions().mode() & 0o022 != 0
            {
                tracing::warn!(dir = %dir.display(), "the agent's directory is writable by others");
            }
        }
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| AgentError::io("creating directory", dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The umask may have narrowed the mode above; make it exactly 0700.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| AgentError::io("setting permissions on", dir, e))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file beside it with `mode`, fsync, rename,
/// fsync of the directory. A crash leaves either the old or the new content.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AgentError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", Uuid::new_v4().simple()));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(mode);
        }
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options
            .open(&tmp)
            .map_err(|e| AgentError::io("creating", &tmp, e))?;
        file.write_all(bytes)
            .map_err(|e| AgentError::io("writing", &tmp, e))?;
        file.sync_all()
            .map_err(|e| AgentError::io("syncing", &tmp, e))?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(|e| AgentError::io("renaming into", path, e))?;
        #[cfg(unix)]
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The default config path given the environment the binary read:
/// `$BREEZE_AGENT_CONFIG`, else the system path for root, else
/// `$XDG_CONFIG_HOME` (or `$HOME/.config`) + `/breeze-agent/agent.json`.
pub fn default_config_path(
    explicit: Option<PathBuf>,
    is_root: bool,
    xdg_config_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> PathBuf {
    if let Some(path) = explicit {
        return path;
    }
    if is_root {
        return PathBuf::from(SYSTEM_CONFIG_PATH);
    }
    let base = xdg_config_home
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("breeze-agent").join("agent.json")
}

/// Whether the process runs as root (always false off Unix).
pub fn running_as_root() -> bool {
    #[cfg(unix)]
    {
        nix::unistd::geteuid().is_root()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AgentFile {
        AgentFile {
            server_url: "http://127.0.0.1:3000".into(),
            device_id: Uuid::new_v4(),
            org_id: Uuid::new_v4(),
            site_id: Uuid::new_v4(),
            token: "brz_secretsecretsecret".into(),
            config: AgentConfig::default(),
            state_dir: None,
            patching: None,
            log_watches: Vec::new(),
        }
    }

    #[test]
    fn round_trip_with_private_modes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etc").join("agent.json");
        let file = sample();
        file.save(&path).unwrap();
        let back = AgentFile::load(&path).unwrap();
        assert_eq!(back, file);
        assert_eq!(
            back.state_dir_for(&path),
            dir.path().join("etc").join("state")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let dmode = std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(dmode, 0o700);
        }
        // Rewriting replaces atomically and leaves no temporary files.
        let mut changed = file;
        changed.token = "brz_other".into();
        changed.save(&path).unwrap();
        assert_eq!(AgentFile::load(&path).unwrap().token, "brz_other");
        let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1);
    }

    #[test]
    fn debug_hides_the_token() {
        let shown = format!("{:?}", sample());
        assert!(!shown.contains("secretsecret"), "{shown}");
    }

    #[test]
    fn default_paths() {
        assert_eq!(
            default_config_path(Some("/x.json".into()), true, None, None),
            PathBuf::from("/x.json")
        );
        assert_eq!(
            default_config_path(None, true, None, None),
            PathBuf::from(SYSTEM_CONFIG_PATH)
        );
        assert_eq!(
            default_config_path(None, false, Some("/xdg".into()), Some("/home/u".into())),
            PathBuf::from("/xdg/breeze-agent/agent.json")
        );
        assert_eq!(
            default_config_path(None, false, None, Some("/home/u".into())),
            PathBuf::from("/home/u/.config/breeze-agent/agent.json")
        );
    }
}
