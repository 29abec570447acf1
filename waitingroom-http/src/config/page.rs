//! The waiting page's look: its texts, colours, language and, for a page of one's own, a whole
//! template. The values go into HTML and a `<style>` block, so they are checked here.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;
use waitingroom_core::SettingsError;

use super::defaulted;
use crate::i18n::Lang;

/// `page_language`'s value for "each visitor's own".
const AUTO: &str = "auto";

layered! {
    /// The waiting page's look.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[command(next_help_heading = "Waiting page")]
    pub struct PageOptions {
        /// Waiting page: title and heading, in every language. Without it: the visitor's
        /// language's own ("You are in the queue" in English).
        #[arg(long, env = "WAITINGROOM_PAGE_TITLE", value_name = "TEXT")]
        pub page_title: Option<String>,
        /// Waiting page: the explanation under the heading, in every language. Without it: a
        /// short explanation, in the visitor's language.
        #[arg(long, env = "WAITINGROOM_PAGE_TEXT", value_name = "TEXT")]
        pub page_text: Option<String>,
        /// Waiting page: background colour (CSS colour).
        #[arg(
            long,
            env = "WAITINGROOM_PAGE_BACKGROUND",
            value_name = "COLOUR",
            default_value = "#f7f7f2"
        )]
        pub page_background: Option<String>,
        /// Waiting page: text colour (CSS colour).
        #[arg(
            long,
            env = "WAITINGROOM_PAGE_FOREGROUND",
            value_name = "COLOUR",
            default_value = "#1d1d1b"
        )]
        pub page_foreground: Option<String>,
        /// Waiting page: accent colour for the position and the progress bar.
        #[arg(
            long,
            env = "WAITINGROOM_PAGE_ACCENT",
            value_name = "COLOUR",
            default_value = "#0b5cad"
        )]
        pub page_accent: Option<String>,
        /// Waiting page language: en, de, fr or es for every visitor; auto: each visitor's
        /// Accept-Language (English when it names none of them).
        #[arg(
            long,
            env = "WAITINGROOM_PAGE_LANGUAGE",
            value_name = "LANG",
            default_value = AUTO
        )]
        pub page_language: Option<String>,
        /// A whole HTML template for the waiting page, with {{placeholders}}
        /// (waitingroom-http/README.md#the-waiting-page).
        /// Without it: the built-in page.
        #[arg(long, env = "WAITINGROOM_PAGE_TEMPLATE", value_name = "PATH")]
        pub page_template: Option<PathBuf>,
    }
}

/// Visitor-facing look of the waiting page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branding {
    /// Title and heading (None: the page language's own).
    pub title: Option<String>,
    /// Explanation (None: the page language's own).
    pub text: Option<String>,
    /// One language for every visitor (None: each visitor's `Accept-Language`).
    pub language: Option<Lang>,
    /// Background colour.
    pub background: String,
    /// Text colour.
    pub foreground: String,
    /// Accent colour.
    pub accent: String,
    /// Whole-page template, if any (already read).
    pub template: Option<String>,
}

impl PageOptions {
    /// The waiting page's look: texts, colours (checked: they go into a `<style>` block) and
    /// the template file, read now.
    pub(super) fn branding(&self) -> Result<Branding, SettingsError> {
        let template = match &self.page_template {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                SettingsError::new(
                    "page_template",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?),
            None => None,
        };
        let language = match defaulted(&self.page_language).trim() {
            AUTO => None,
            tag => Some(
                Lang::from_tag(tag)
                    .filter(|l| l.tag() == tag)
                    .ok_or_else(|| {
                        SettingsError::new("page_language", "must be en, de, fr, es or auto")
                    })?,
            ),
        };
        Ok(Branding {
            title: self.page_title.clone(),
            text: self.page_text.clone(),
            language,
            background: colour("page_background", &self.page_background)?,
            foreground: colour("page_foreground", &self.page_foreground)?,
            accent: colour("page_accent", &self.page_accent)?,
            template,
        })
    }
}

/// A CSS colour goes into a `<style>` block: allow only characters colours are written with.
fn colour(field: &'static str, value: &Option<String>) -> Result<String, SettingsError> {
    let v = defaulted(value);
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "#(),.% -".contains(c));
    if ok {
        Ok(v)
    } else {
        Err(SettingsError::new(
            field,
            "must be a CSS colour such as #0b5cad, rgb(11, 92, 173) or navy",
        ))
    }
}
