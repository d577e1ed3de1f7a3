//! The container image's recipe matches the workspace (docker itself is not run here): the
//! Dockerfile builds this package's binary under its real names, with a Rust at least the
//! workspace's `rust-version`, ships it as the entrypoint, exposes the node's ports, runs
//! as a non-root user, and the build context leaves `target/` out.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The Dockerfile's instructions with `\` continuations joined.
fn instructions() -> Vec<String> {
    let text = read("Dockerfile").replace("\\\n", " ");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

fn version(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn the_dockerfile_builds_and_ships_this_binary() {
    let lines = instructions();
    let package = env!("CARGO_PKG_NAME");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_moat"))
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();

    let build = lines
        .iter()
        .find(|l| l.starts_with("RUN") && l.contains("cargo build"))
        .expect("a cargo build step");
    for part in [
        "--release".to_string(),
        "--locked".to_string(),
        format!("-p {package} "),
        format!("--bin {binary} "),
        format!("target/release/{binary} "),
    ] {
        assert!(build.contains(&part), "{part:?} missing from: {build}");
    }

    // The builder's Rust is new enough for the workspace.
    let cargo_toml = read("Cargo.toml");
    let wanted = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace's rust-version")
        .trim_matches('"');
    let from = lines
        .iter()
        .find(|l| l.starts_with("FROM rust:"))
        .expect("a Rust builder stage");
    let image = from
        .trim_start_matches("FROM rust:")
        .split(['-', ' '])
        .next()
        .unwrap();
    assert!(version(image) >= version(wanted), "{from} < {wanted}");
    // npm is there for the genesis allocations' package.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("RUN") && l.contains("apt-get install") && l.contains(" npm ")),
        "the builder installs npm"
    );

    // Two stages: the last one copies the binary out of the builder.
    let froms: Vec<&String> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("COPY --from=builder")
            && l.ends_with(&format!("/usr/local/bin/{binary}"))),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!(r#"ENTRYPOINT ["{binary}"]"#)),
        "{lines:?}"
    );
    let expose = lines
        .iter()
        .find(|l| l.starts_with("EXPOSE"))
        .expect("EXPOSE");
    for port in ["8545", "8546", "8551", "30303", "6060"] {
        assert!(
            expose.split_whitespace().any(|p| p == port),
            "{port}: {expose}"
        );
    }
    let user = lines
        .iter()
        .find(|l| l.starts_with("USER "))
        .expect("a USER");
    assert!(!user.contains(" 0") && !user.contains("root"), "{user}");

    let ignore = read(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "{ignore}");
}
