//! What visitors' browsers see of the node: where admitted visitors are sent, the URL the room
//! is reached at (the `Origin` joins must come from) and the cookies' attributes.

use clap::Args;
use serde::Deserialize;
use waitingroom_core::SettingsError;

use super::{defaulted, named};
use crate::wire::cookies::{CookieOptions, SameSite};

/// Where admitted visitors go unless told: this host's root, for a room in front of its site.
const THIS_HOSTS_ROOT: &str = "/";

layered! {
    /// Where visitors go, the room's URL and its cookies.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Visitors and cookies")]
    pub struct VisitorOptions {
        /// Where admitted visitors are sent: the protected site, an absolute http:// or https://
        /// URL; / is this host's root (a room in front of its site).
        #[arg(
            long,
            env = "WAITINGROOM_ORIGIN_URL",
            value_name = "URL",
            default_value = THIS_HOSTS_ROOT
        )]
        pub origin_url: Option<String>,
        /// The URL visitors reach the room at (e.g. https://queue.shop.example). Joins from
        /// pages of any other origin are refused (403 cross_site). Without it, a join's Origin
        /// must match its Host header.
        #[arg(long, env = "WAITINGROOM_PUBLIC_URL", value_name = "URL")]
        pub public_url: Option<String>,
        /// Mark cookies `Secure` (browsers send them over HTTPS only). Always on when
        /// public_url is https.
        #[arg(
            long,
            env = "WAITINGROOM_COOKIE_SECURE",
            value_name = "BOOL",
            default_value = "false"
        )]
        pub cookie_secure: Option<bool>,
        /// Cookie `Domain` (e.g. example.com: the ticket and pass cookies then reach every host
        /// under it, say an origin on shop.example.com). Without it: the room's host only.
        #[arg(long, env = "WAITINGROOM_COOKIE_DOMAIN", value_name = "DOMAIN")]
        pub cookie_domain: Option<String>,
        /// Appended to every cookie's name (`wr_ticket_SUFFIX`, `wr_pass_SUFFIX`,
        /// `wr_leave_key_SUFFIX`): two rooms on one domain keep their visitors apart. Letters,
        /// digits, `-`, `_`; up to 32.
        #[arg(long, env = "WAITINGROOM_COOKIE_NAME_SUFFIX", value_name = "SUFFIX")]
        pub cookie_name_suffix: Option<String>,
        /// Cookie `SameSite`: lax, strict or none (none needs cookie_secure: a room embedded in
        /// another site).
        #[arg(
            long,
            env = "WAITINGROOM_COOKIE_SAMESITE",
            value_name = "MODE",
            default_value = named(SameSite::default())
        )]
        pub cookie_samesite: Option<SameSite>,
    }
}

impl VisitorOptions {
    /// Where admitted visitors go: it ends up in a `Location` header. An absolute http(s) URL
    /// with a host: no `//host` (which a browser reads as "any scheme"), no `javascript:` or
    /// other scheme, no path alone — except `/`, this host's root: for a room in front of its
    /// site, where a gate sends pass holders on.
    pub(super) fn origin_url(&self) -> Result<String, SettingsError> {
        let origin_url = defaulted(&self.origin_url);
        if origin_url == THIS_HOSTS_ROOT {
            return Ok(origin_url);
        }
        if check_url("origin_url", &origin_url).is_err() || web_origin(&origin_url).is_none() {
            return Err(SettingsError::new(
                "origin_url",
                format!("`{origin_url}` is not an absolute http:// or https:// URL with a host"),
            ));
        }
        if origin_url.contains(['"', '<', '>', '\n', '\r']) {
            return Err(SettingsError::new(
                "origin_url",
                "must not contain quotes or <>",
            ));
        }
        Ok(origin_url)
    }

    /// The room's public URL, if given, and its origin (`scheme://host[:port]` as browsers
    /// write it in an `Origin` header).
    pub(super) fn public_url(&self) -> Result<Option<(String, String)>, SettingsError> {
        let Some(url) = &self.public_url else {
            return Ok(None);
        };
        let url = url.trim().trim_end_matches('/').to_owned();
        check_url("public_url", &url)?;
        let origin = web_origin(&url)
            .ok_or_else(|| SettingsError::new("public_url", format!("`{url}` has no host")))?;
        Ok(Some((url, origin)))
    }

    /// The cookies' names and attributes. Secure whenever visitors reach the room over https.
    pub(super) fn cookies(&self) -> Result<CookieOptions, SettingsError> {
        let https = self
            .public_url
            .as_deref()
            .is_some_and(|u| u.trim().to_ascii_lowercase().starts_with("https://"));
        let secure = defaulted(&self.cookie_secure) || https;
        let same_site = defaulted(&self.cookie_samesite);
        if same_site == SameSite::None && !secure {
            return Err(SettingsError::new(
                "cookie_samesite",
                "none needs cookie_secure (browsers drop SameSite=None cookies that are not \
                 Secure)",
            ));
        }
        let domain = self.cookie_domain.as_deref().map(str::trim);
        let host = |d: &str| {
            !d.is_empty()
                && d.len() <= 253
                && d.trim_start_matches('.')
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        };
        if domain.is_some_and(|d| !host(d)) {
            return Err(SettingsError::new(
                "cookie_domain",
                "must be a host name, e.g. example.com",
            ));
        }
        let suffix = self.cookie_name_suffix.as_deref().unwrap_or("").trim();
        let fine = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if suffix.len() > 32 || !suffix.chars().all(fine) {
            return Err(SettingsError::new(
                "cookie_name_suffix",
                "must be up to 32 letters, digits, `-` or `_`",
            ));
        }
        Ok(CookieOptions::new(
            secure,
            domain.map(str::to_owned),
            same_site,
            suffix,
        ))
    }
}

/// The origin of an absolute http(s) URL as a browser serialises it: scheme and host in lower
/// case, the port only when it is not the scheme's default. `None` without a host.
pub fn web_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next()?.to_ascii_lowercase();
    // Credentials (`user@`) never appear in an Origin.
    let host = authority.rsplit('@').next()?;
    let default = match scheme.as_str() {
        "http" => ":80",
        "https" => ":443",
        _ => return None,
    };
    let host = host.strip_suffix(default).unwrap_or(host);
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

pub(super) fn check_url(field: &'static str, url: &str) -> Result<(), SettingsError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(()),
        _ => Err(SettingsError::new(
            field,
            format!("`{url}` is not an http:// or https:// URL"),
        )),
    }
}
