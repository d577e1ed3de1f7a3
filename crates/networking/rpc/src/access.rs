//! Who may use a server, with go-ethereum's rules, flags and defaults:
//!
//! - **Host** (`--http.vhosts`, `--authrpc.vhosts`; default `localhost`): an HTTP request
//!   whose `Host` names a host not in the list gets 403 "invalid host specified". A Host
//!   that is an IP address, or absent, is served; `*` allows any. This is what stops DNS
//!   rebinding: a web page whose domain now resolves to 127.0.0.1 still sends its own
//!   domain as Host.
//! - **Origin** (`--ws.origins`; default `http://localhost` and `http://<hostname>`, the
//!   host's name as the node gives it, [`AllowedOrigins::on_host`]): a WebSocket upgrade
//!   that carries an `Origin` not allowed gets 403. Browsers always send one; other
//!   clients need not. A rule matches on the scheme, host and port it gives.
//! - **CORS** (`--http.corsdomain`; default none): for an allowed origin, preflights are
//!   answered and responses carry `Access-Control-Allow-Origin`; with none, no CORS
//!   header is ever sent, so a browser page cannot read an answer nor send a JSON request.
//! - **Namespaces** (`--http.api`, `--ws.api`; default `eth,net,web3`): a call to a
//!   method of another namespace gets -32601 "Method not found", as an unknown method
//!   does; `admin`, `txpool` and `debug` are served only when listed.

use crate::middleware::{
    BoxFuture, HttpMiddleware, HttpService, Middleware, RpcMiddleware, RpcService, answer, pass,
};
use crate::server;
use jsonrpsee::core::middleware::{Notification, Request};
use jsonrpsee::core::server::MethodResponse;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use jsonrpsee::types::{ErrorCode, ErrorObject};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

/// geth's default `--http.api` and `--ws.api`.
pub const DEFAULT_API: &[&str] = &["eth", "net", "web3"];

/// A set of namespaces a transport serves, or all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespaces {
    any: bool,
    names: BTreeSet<String>,
}

impl Default for Namespaces {
    fn default() -> Self {
        Self::new(DEFAULT_API)
    }
}

impl Namespaces {
    /// The namespaces in `names`, trimmed and lowercased; empty entries are dropped.
    pub fn new<S: AsRef<str>>(names: &[S]) -> Self {
        Self {
            any: false,
            names: names
                .iter()
                .map(|n| n.as_ref().trim().to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// Every namespace (in-process use and tests).
    pub fn all() -> Self {
        Self {
            any: true,
            names: BTreeSet::new(),
        }
    }

    /// Whether `method`'s namespace (the part before `_`) is served; `rpc` (`rpc_modules`)
    /// always is, as in geth.
    pub fn allows(&self, method: &str) -> bool {
        let ns = namespace_of(method);
        self.any || ns == "rpc" || self.names.contains(ns)
    }

    /// Names given that none of `methods` is in (geth logs these and goes on).
    pub fn unknown<'a>(&self, methods: impl Iterator<Item = &'a str>) -> Vec<String> {
        let have: BTreeSet<&str> = methods.map(namespace_of).collect();
        self.names
            .iter()
            .filter(|n| !have.contains(n.as_str()))
            .cloned()
            .collect()
    }

    /// These and `name`.
    pub fn with(mut self, name: &str) -> Self {
        self.names.insert(name.to_ascii_lowercase());
        self
    }

    /// The names listed, in order (none for [`Self::all`]).
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// The part of a method name before its first `_`.
pub fn namespace_of(method: &str) -> &str {
    method.split_once('_').map_or(method, |(ns, _)| ns)
}

/// Hostnames a server answers to (`--http.vhosts`); `*` is any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualHosts {
    any: bool,
    names: BTreeSet<String>,
}

impl Default for VirtualHosts {
    fn default() -> Self {
        Self::new(&["localhost"])
    }
}

impl VirtualHosts {
    /// The host names in `names`, trimmed and lowercased; a `*` among them allows any.
    pub fn new<S: AsRef<str>>(names: &[S]) -> Self {
        let names: BTreeSet<String> = names
            .iter()
            .map(|n| n.as_ref().trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        Self {
            any: names.contains("*"),
            names,
        }
    }

    /// Any host (`--http.vhosts '*'`).
    pub fn any() -> Self {
        Self::new(&["*"])
    }

    /// geth's `virtualHostHandler`: no Host, or an IP address, is served; a name must be
    /// listed (or the list holds `*`).
    pub fn allows(&self, host_header: Option<&str>) -> bool {
        let Some(host) = host_header.filter(|h| !h.is_empty()) else {
            return true;
        };
        let host = split_host_port(host).to_ascii_lowercase();
        if host.parse::<std::net::IpAddr>().is_ok() {
            return true;
        }
        self.any || self.names.contains(&host)
    }
}

/// The host part of `host[:port]` (`[v6]:port` too); the whole text when it is not that
/// shape, as Go's `net.SplitHostPort` failing leaves it.
fn split_host_port(h: &str) -> &str {
    if let Some(rest) = h.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((v6, tail)) if tail.is_empty() || tail.starts_with(':') => v6,
            _ => h,
        };
    }
    match h.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => h,
    }
}

/// One `--ws.origins` (or `--http.corsdomain`) rule: the scheme, host and port it gives;
/// what it leaves out matches anything.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OriginRule {
    scheme: Option<String>,
    host: Option<String>,
    port: Option<String>,
}

/// geth's `parseOriginURL`: `scheme://host:port`, or `host[:port]` without a scheme.
fn parse_origin(origin: &str) -> Option<OriginRule> {
    let o = origin.trim().to_ascii_lowercase();
    if o.is_empty() {
        return None;
    }
    let (scheme, rest) = match o.split_once("://") {
        Some((s, r)) => (Some(s.to_string()), r.to_string()),
        None => (None, o.clone()),
    };
    // Drop any path.
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, tail)) => (h.to_string(), tail.strip_prefix(':').map(str::to_string)),
            None => (authority.to_string(), None),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p.to_string())),
            None => (authority.to_string(), None),
        }
    };
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Some(OriginRule {
        scheme: non_empty(scheme),
        host: non_empty(Some(host)),
        port: non_empty(port),
    })
}

/// Origins allowed to open a WebSocket (`--ws.origins`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigins {
    any: bool,
    rules: Vec<OriginRule>,
}

impl Default for AllowedOrigins {
    /// geth's default when `--ws.origins` is not given, on a host whose name is not known
    /// here: `http://localhost` ([`Self::on_host`]).
    fn default() -> Self {
        Self::on_host::<&str>(&[], None)
    }
}

impl AllowedOrigins {
    /// An empty list is geth's default, without the host's name ([`Self::on_host`]).
    pub fn new<S: AsRef<str>>(list: &[S]) -> Self {
        Self::on_host(list, None)
    }

    /// `list`; if it is empty, geth's default: `http://localhost` and
    /// `http://<hostname>`, with the host's name as the node found it (`None`: unknown).
    pub fn on_host<S: AsRef<str>>(list: &[S], hostname: Option<&str>) -> Self {
        let list: Vec<&str> = list
            .iter()
            .map(|s| s.as_ref().trim())
            .filter(|s| !s.is_empty())
            .collect();
        if list.is_empty() {
            let mut names = vec!["http://localhost".to_string()];
            if let Some(h) = hostname
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
            {
                names.push(format!("http://{h}"));
            }
            return Self {
                any: false,
                rules: names.iter().filter_map(|o| parse_origin(o)).collect(),
            };
        }
        Self {
            any: list.contains(&"*"),
            rules: list.iter().filter_map(|o| parse_origin(o)).collect(),
        }
    }

    /// Any origin (`--ws.origins '*'`).
    pub fn any() -> Self {
        Self::new(&["*"])
    }

    /// geth's `wsHandshakeValidator`: no Origin header is allowed (only browsers must
    /// send one); otherwise a rule must match it.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else {
            return true;
        };
        if self.any {
            return true;
        }
        let Some(o) = parse_origin(origin) else {
            return false;
        };
        self.rules.iter().any(|r| {
            r.scheme
                .as_ref()
                .is_none_or(|s| o.scheme.as_ref() == Some(s))
                && r.host.as_ref().is_none_or(|h| o.host.as_ref() == Some(h))
                && r.port.as_ref().is_none_or(|p| o.port.as_ref() == Some(p))
        })
    }
}

/// CORS origins (`--http.corsdomain`): empty answers no preflight and sends no CORS
/// header; `*` allows any; entries may hold `*` wildcards (`http://*.example.org`), as
/// in geth's CORS library.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsDomains(Vec<String>);

impl CorsDomains {
    /// The origins in `list`, trimmed and lowercased; empty entries are dropped.
    pub fn new<S: AsRef<str>>(list: &[S]) -> Self {
        Self(
            list.iter()
                .map(|s| s.as_ref().trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }

    /// Whether no origin is listed: no preflight is answered, no CORS header sent.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn allows(&self, origin: &str) -> bool {
        let origin = origin.to_ascii_lowercase();
        self.0.iter().any(|rule| wildcard_match(rule, &origin))
    }
}

/// `*` in `pattern` matches any run of characters.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// How a call reached the server: the namespace filter serves each its own list.
#[derive(Debug, Clone)]
pub struct Allowed(pub Arc<Namespaces>);

/// The checks of one port: what it serves over HTTP (`None`: no HTTP) and WebSocket
/// (`None`: no WebSocket), and the Host, Origin and CORS lists.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    /// Namespaces served over HTTP (`--http.api`); `None`: the port serves no HTTP.
    pub http: Option<Arc<Namespaces>>,
    /// Namespaces served over WebSocket (`--ws.api`); `None`: no WebSocket upgrades.
    pub ws: Option<Arc<Namespaces>>,
    /// Host names HTTP requests may name (`--http.vhosts`).
    pub vhosts: VirtualHosts,
    /// Origins WebSocket upgrades may come from (`--ws.origins`).
    pub origins: AllowedOrigins,
    /// Origins browsers may read answers for (`--http.corsdomain`).
    pub cors: CorsDomains,
    /// How long an HTTP request's calls may run (the write timeout); `None`: unbounded.
    pub call_timeout: Option<std::time::Duration>,
}

/// Applies an [`AccessPolicy`] to each HTTP request (and WebSocket upgrade) before
/// anything else reads it.
pub type AccessLayer = Middleware<Access>;

impl AccessLayer {
    /// The layer that applies `policy` to every request.
    pub fn new(policy: AccessPolicy) -> Self {
        Middleware(Access(Arc::new(policy)))
    }
}

/// [`AccessLayer`]'s logic.
#[derive(Debug, Clone)]
pub struct Access(Arc<AccessPolicy>);

fn text(status: u16, body: &'static str) -> HttpResponse {
    HttpResponse::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .body(HttpBody::from(body))
        .expect("a static status and headers make a valid response")
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

impl HttpMiddleware<HttpBody> for Access {
    fn call<S: HttpService<HttpBody>>(&self, inner: &mut S, mut req: HttpRequest) -> BoxFuture {
        let p = &self.0;
        if jsonrpsee::server::ws::is_upgrade_request(&req) {
            let Some(api) = &p.ws else {
                return answer(text(404, "not found\n"));
            };
            // An Origin header that is not valid text is a foreign one.
            let origin = match req.headers().get("origin") {
                None => None,
                Some(v) => Some(v.to_str().unwrap_or("\u{0}")),
            };
            if !p.origins.allows(origin) {
                metrics::counter!("moat_rpc_refused_access_total", "check" => "origin")
                    .increment(1);
                tracing::debug!(origin = ?origin, remote = ?server::meta(&req).map(|m| m.conn.remote), "WebSocket refused: origin not allowed (--ws.origins)");
                return answer(text(
                    403,
                    "websocket: request origin not allowed by --ws.origins\n",
                ));
            }
            req.extensions_mut().insert(Allowed(Arc::clone(api)));
            return pass(inner, req);
        }
        let Some(api) = &p.http else {
            return answer(text(404, "not found\n"));
        };
        if !p.vhosts.allows(header(&req, "host")) {
            metrics::counter!("moat_rpc_refused_access_total", "check" => "host").increment(1);
            return answer(text(403, "invalid host specified\n"));
        }
        let origin = header(&req, "origin")
            .filter(|o| !p.cors.is_empty() && p.cors.allows(o))
            .map(str::to_string);
        if req.method() == "OPTIONS" && header(&req, "access-control-request-method").is_some() {
            return answer(preflight(&req, origin.as_deref()));
        }
        req.extensions_mut().insert(Allowed(Arc::clone(api)));
        if let Some(t) = p.call_timeout {
            req.extensions_mut()
                .insert(crate::limits::CallDeadline(std::time::Instant::now() + t));
        }
        let fut = inner.call(req);
        Box::pin(async move {
            let mut resp = fut.await.map_err(Into::into)?;
            if let Some(origin) = origin
                && let Ok(v) = origin.parse()
            {
                let h = resp.headers_mut();
                h.insert("access-control-allow-origin", v);
                h.append("vary", hyper::header::HeaderValue::from_static("Origin"));
            }
            Ok(resp)
        })
    }
}

/// The answer to a CORS preflight: the allowances for an allowed origin asking for POST
/// or GET (any headers, cached 600 s, as geth's CORS setup), none otherwise.
fn preflight(req: &HttpRequest, origin: Option<&str>) -> HttpResponse {
    let mut b = HttpResponse::builder().status(204).header(
        "vary",
        "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
    );
    let method = header(req, "access-control-request-method").unwrap_or_default();
    if let Some(origin) = origin
        && matches!(method.to_ascii_uppercase().as_str(), "POST" | "GET")
    {
        b = b
            .header("access-control-allow-origin", origin)
            .header("access-control-allow-methods", method.to_ascii_uppercase())
            .header("access-control-max-age", "600");
        if let Some(h) = header(req, "access-control-request-headers") {
            b = b.header("access-control-allow-headers", h);
        }
    }
    b.body(HttpBody::empty())
        .unwrap_or_else(|_| text(400, "bad preflight\n"))
}

/// Refuses calls to namespaces the transport does not serve (see [`Allowed`]); calls
/// with no [`Allowed`] (in-process) pass.
pub type NamespaceFilterLayer = Middleware<NamespaceFilter>;

/// [`NamespaceFilterLayer`]'s logic.
#[derive(Debug, Clone, Copy, Default)]
pub struct NamespaceFilter;

fn served(allowed: Option<&Allowed>, method: &str) -> bool {
    allowed.is_none_or(|a| a.0.allows(method))
}

impl RpcMiddleware for NamespaceFilter {
    fn call<'a, S: RpcService>(
        &self,
        inner: &S,
        req: Request<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        let inner = inner.clone();
        async move {
            if !served(req.extensions().get::<Allowed>(), req.method_name()) {
                metrics::counter!("moat_rpc_refused_access_total", "check" => "namespace")
                    .increment(1);
                return MethodResponse::error(req.id, ErrorObject::from(ErrorCode::MethodNotFound))
                    .with_extensions(req.extensions);
            }
            inner.call(req).await
        }
    }

    fn notification<'a, S: RpcService>(
        &self,
        inner: &S,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        let inner = inner.clone();
        async move {
            if !served(n.extensions().get::<Allowed>(), n.method_name()) {
                return MethodResponse::notification();
            }
            inner.notification(n).await
        }
    }

    // Batches are split into calls by the layer outside this one: they pass.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_namespace_is_always_served() {
        let n = Namespaces::default();
        assert!(n.allows("rpc_modules"));
        assert!(n.allows("eth_chainId"));
        assert!(!n.allows("admin_peers"));
        assert!(Namespaces::new(&["admin"]).allows("rpc_modules"));
    }

    #[test]
    fn hosts_follow_geths_vhost_rules() {
        let v = VirtualHosts::default();
        assert!(v.allows(None));
        assert!(v.allows(Some("")));
        assert!(v.allows(Some("localhost")));
        assert!(v.allows(Some("LOCALHOST:8545")));
        assert!(v.allows(Some("127.0.0.1:8545")));
        assert!(v.allows(Some("[::1]:8545")));
        assert!(v.allows(Some("::1")));
        assert!(!v.allows(Some("evil.example")));
        assert!(!v.allows(Some("evil.example:8545")));
        assert!(!v.allows(Some("localhost.evil.example")));
        assert!(VirtualHosts::any().allows(Some("evil.example")));
        let named = VirtualHosts::new(&["node.example", " Other.Example "]);
        assert!(named.allows(Some("other.example:80")));
        assert!(!named.allows(Some("localhost")));
    }

    #[test]
    fn origins_follow_geths_rules() {
        let d = AllowedOrigins::new::<&str>(&[]);
        assert!(d.allows(None), "no Origin: not a browser");
        assert!(d.allows(Some("http://localhost")));
        assert!(d.allows(Some("http://localhost:3000")));
        assert!(!d.allows(Some("https://localhost")), "the scheme is given");
        assert!(!d.allows(Some("http://evil.example")));
        assert!(!d.allows(Some("null")));
        let list = AllowedOrigins::new(&["https://app.example", "localhost:8080"]);
        assert!(list.allows(Some("https://app.example")));
        assert!(list.allows(Some("https://app.example:443")));
        assert!(!list.allows(Some("http://app.example")));
        assert!(list.allows(Some("http://localhost:8080")));
        assert!(!list.allows(Some("http://localhost:8081")));
        assert!(AllowedOrigins::any().allows(Some("http://evil.example")));
    }

    #[test]
    fn namespaces_are_method_prefixes() {
        let d = Namespaces::default();
        assert!(d.allows("eth_chainId"));
        assert!(d.allows("eth_subscribe"));
        assert!(d.allows("web3_clientVersion"));
        assert!(!d.allows("admin_nodeInfo"));
        assert!(!d.allows("txpool_content"));
        assert!(!d.allows("ethx"));
        let n = Namespaces::new(&["eth", "ADMIN", "personal", ""]);
        assert!(n.allows("admin_peers"));
        assert!(!n.allows("debug_traceTransaction"));
        let methods = ["eth_chainId", "admin_peers", "debug_traceTransaction"];
        assert_eq!(n.unknown(methods.into_iter()), vec!["personal".to_string()]);
        assert!(Namespaces::all().allows("debug_traceTransaction"));
    }

    #[test]
    fn cors_wildcards() {
        let c = CorsDomains::new(&["http://*.example.org", "https://app.example"]);
        assert!(c.allows("http://a.example.org"));
        assert!(c.allows("HTTPS://APP.EXAMPLE"));
        assert!(!c.allows("http://example.org"));
        assert!(!c.allows("https://app.example.evil"));
        assert!(CorsDomains::new(&["*"]).allows("http://anything"));
        assert!(wildcard_match("a*b*c", "axxbyyc"));
        assert!(!wildcard_match("a*b*c", "axxc"));
    }
}
