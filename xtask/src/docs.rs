//! `cargo xtask docs`: rewrites the documents generated from the tool registry — the tool
//! catalogue and the agent skill — so the checked-in copies match the code
//! (`breeze_tools::docs`; its `checked_in_docs_are_fresh` test fails until this is run).

use std::path::Path;

use anyhow::Context;
use breeze_tools::docs;

pub(crate) fn run() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask lives inside the workspace")?;
    // The skill directory is replaced whole, so a reference that is no longer generated goes.
    let skill_dir = root.join(docs::SKILL_DIR);
    if skill_dir.exists() {
        std::fs::remove_dir_all(&skill_dir)
            .with_context(|| format!("removing {}", skill_dir.display()))?;
    }
    for f in docs::repository_files(&breeze_tools::all()) {
        let path = root.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, f.contents).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", f.path);
    }
    Ok(())
}
