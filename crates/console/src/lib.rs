//! Warren's web console: the static files of a single-page application (plain HTML, CSS and
//! JavaScript modules, no build step, nothing fetched from a CDN) embedded in the binary.
//!
//! The console talks only to the HTTP API at `/api` (RabbitMQ's paths and JSON shapes), so the
//! crate is framework-free: the management server mounts it at `/` by answering each GET that
//! is not under `/api` with [`asset`]. Paths are matched exactly against the embedded table,
//! so no request can reach anything but these files.

/// One embedded file: the path it is served at (relative to the console's root), its
/// `Content-Type` and its bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            bytes: include_bytes!(concat!("../assets/", $path)),
        }
    };
}

/// Every file under `assets/`; a test checks that none is missing.
const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("console.css", CSS),
    asset!("favicon.svg", SVG),
    asset!("js/api.js", JS),
    asset!("js/app.js", JS),
    asset!("js/bindings.js", JS),
    asset!("js/chart.js", JS),
    asset!("js/definitions.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/forms.js", JS),
    asset!("js/format.js", JS),
    asset!("js/list.js", JS),
    asset!("js/members.js", JS),
    asset!("js/policies.js", JS),
    asset!("js/pages/admin.js", JS),
    asset!("js/pages/channel.js", JS),
    asset!("js/pages/channels.js", JS),
    asset!("js/pages/cluster.js", JS),
    asset!("js/pages/connection.js", JS),
    asset!("js/pages/connections.js", JS),
    asset!("js/pages/exchange.js", JS),
    asset!("js/pages/exchanges.js", JS),
    asset!("js/pages/login.js", JS),
    asset!("js/pages/node.js", JS),
    asset!("js/pages/overview.js", JS),
    asset!("js/pages/policy.js", JS),
    asset!("js/pages/queue.js", JS),
    asset!("js/pages/queues.js", JS),
    asset!("js/pages/user.js", JS),
    asset!("js/pages/vhost.js", JS),
];

/// The console file served at `path` (as in the request line, with or without its leading
/// `/`; the query string already removed): its `Content-Type` and bytes. `/` and `/index.html`
/// are the page itself; anything not embedded is `None` (answer 404).
pub fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    let relative = path.strip_prefix('/').unwrap_or(path);
    let relative = if relative.is_empty() {
        "index.html"
    } else {
        relative
    };
    ASSETS
        .iter()
        .find(|asset| asset.path == relative)
        .map(|asset| (asset.content_type, asset.bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn files_under(dir: &Path, root: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files_under(&path, root, found);
            } else {
                let relative = path.strip_prefix(root).unwrap();
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    #[test]
    fn every_file_under_assets_is_served() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let mut found = Vec::new();
        files_under(&root, &root, &mut found);
        found.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        embedded.sort();
        assert_eq!(found, embedded, "assets/ and the ASSETS table differ");
    }

    #[test]
    fn root_is_the_page_and_types_follow_extensions() {
        let (content_type, page) = asset("/").unwrap();
        assert_eq!(content_type, HTML);
        assert_eq!(asset("/index.html").unwrap().1, page);
        assert_eq!(asset("").unwrap().1, page);
        assert!(std::str::from_utf8(page).unwrap().contains("js/app.js"));
        assert_eq!(asset("/js/app.js").unwrap().0, JS);
        assert_eq!(asset("console.css").unwrap().0, CSS);
        for asset in ASSETS {
            let expected = match asset.path.rsplit('.').next().unwrap() {
                "html" => HTML,
                "css" => CSS,
                "js" => JS,
                "svg" => SVG,
                other => panic!("no content type for .{other}"),
            };
            assert_eq!(asset.content_type, expected, "{}", asset.path);
        }
    }

    #[test]
    fn nothing_outside_the_table_is_served() {
        for path in [
            "/api/overview",
            "/../Cargo.toml",
            "/js/",
            "/js",
            "/src/lib.rs",
            "//",
        ] {
            assert!(asset(path).is_none(), "{path}");
        }
    }
}
