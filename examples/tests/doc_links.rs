//! Every relative link in README.md and docs/*.md points at a file that exists, and every
//! `#anchor` into a Markdown file names one of its headings (GitHub's slug rules).

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    files.extend(
        docs.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    files
}

/// The targets of `[text](target)` links, outside code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    text.lines().filter(|l| l.starts_with('#')).map(|l| slug(l.trim_start_matches('#'))).collect()
}

#[test]
fn relative_links_in_the_docs_resolve() {
    let root = repo_root();
    let mut broken = Vec::new();
    for file in markdown_files(&root) {
        let text = std::fs::read_to_string(&file).expect("readable Markdown");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() { file.clone() } else { file.parent().expect("dir").join(path) };
            if !dest.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
            } else if !anchor.is_empty() && dest.extension().is_some_and(|x| x == "md") {
                let text = std::fs::read_to_string(&dest).expect("readable Markdown");
                if !anchors(&text).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
