//! The operators' settings table holds to the code: it lists every setting and nothing else, and
//! the default it gives each is the one `--help` shows and the one the node runs with.
//!
//! The table is found by its header row, [`TABLE_HEADER`], in the first of [`DOCS`] holding
//! it. Each row is `| names | default | meaning |`. Names are in backticks, several in one row
//! either separated by `, ` (one default for them all) or by ` / ` (as many defaults, separated
//! by ` / ` too). A default that is a value is written first in the cell, in backticks, as the
//! flag takes it (`` `5000` ``, `` `127.0.0.0/8,::1` ``), and may be followed by words; a
//! setting without one is described in words that do not start with a backtick (`none`, `hash
//! of advertise`).

use std::collections::BTreeMap;

use clap::{Arg, FromArgMatches};

use super::sources::{SETTINGS, parse_file, settings_command};
use super::*;

/// Where the settings table is, from this crate's folder.
const DOC: &str = "../docs/operating.md";

/// The header row the table starts with.
const TABLE_HEADER: &str = "| setting | default | meaning |";

/// The settings table: each setting's documented default (`None`: described in words).
fn documented_defaults() -> BTreeMap<String, Option<String>> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let path = format!("{dir}/{DOC}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        text.contains(TABLE_HEADER),
        "no settings table (`{TABLE_HEADER}`) in {path}"
    );
    let rows = text
        .lines()
        .skip_while(|l| l.trim() != TABLE_HEADER)
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    let mut table = BTreeMap::new();
    for row in rows {
        for (name, default) in row_defaults(row) {
            let again = table.insert(name.clone(), default);
            assert!(again.is_none(), "{path}: {name} has two rows");
        }
    }
    table
}

/// The settings one row names, each with its documented default.
fn row_defaults(row: &str) -> Vec<(String, Option<String>)> {
    let cells: Vec<&str> = row
        .trim()
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    let [names, defaults, _meaning] = cells[..] else {
        panic!("a row of the settings table has three cells: {row}");
    };
    let unquote = |name: &str| name.trim().trim_matches('`').to_owned();
    if names.contains(" / ") {
        let defaults: Vec<&str> = defaults.split(" / ").collect();
        let names: Vec<&str> = names.split(" / ").collect();
        assert_eq!(names.len(), defaults.len(), "one default per name: {row}");
        let pairs = names.into_iter().zip(defaults);
        pairs.map(|(n, d)| (unquote(n), value(d))).collect()
    } else {
        let names = names.split(", ");
        names.map(|n| (unquote(n), value(defaults))).collect()
    }
}

/// The value a default cell starts with, in backticks; `None` when it starts with words.
fn value(cell: &str) -> Option<String> {
    let rest = cell.trim().strip_prefix('`')?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// A setting's default as clap has it: what `--help` shows and what the node runs with.
fn clap_default(arg: &Arg) -> Option<String> {
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// What `--help` shows for the flag `--long`: its line, and the lines under it up to the next
/// flag or heading (help text is indented deeper than either).
fn help_block(help: &str, long: &str) -> String {
    let flag_or_heading = |line: &&str| {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        !text.is_empty() && (indent == 0 || indent < 10 && text.starts_with('-'))
    };
    let mut lines = help.lines();
    let head = format!("--{long} <");
    lines
        .find(|line| line.trim_start().starts_with(&head))
        .unwrap_or_else(|| panic!("--{long} is not in --help"));
    lines
        .take_while(|line| !flag_or_heading(line))
        .collect::<Vec<_>>()
        .join("\n")
}

fn base() -> Options {
    let mut o = Options::default();
    o.network.key_file = Some("k.pem".into());
    o
}

#[test]
fn every_setting_has_one_name_everywhere() {
    for arg in settings_command().get_arguments() {
        let id = arg.get_id().as_str();
        assert_eq!(arg.get_long(), Some(id.replace('_', "-").as_str()), "{id}");
        let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        assert_eq!(
            env,
            Some(format!("WAITINGROOM_{}", id.to_uppercase())),
            "{id}"
        );
    }
}

#[test]
fn the_table_lists_every_setting_and_nothing_else() {
    let documented: Vec<String> = documented_defaults().into_keys().collect();
    let mut settings = SETTINGS.clone();
    settings.sort();
    assert_eq!(documented, settings);
}

/// `--help` shows each default clap has (and no other: a default is never written in the help
/// text by hand), and the table gives the same.
#[test]
fn help_and_table_show_the_same_defaults() {
    let table = documented_defaults();
    let mut cmd = settings_command();
    let help = cmd.render_long_help().to_string();
    for arg in settings_command().get_arguments() {
        let id = arg.get_id().as_str();
        let default = clap_default(arg);
        let block = help_block(&help, arg.get_long().unwrap_or(id));
        match &default {
            Some(d) => assert!(block.contains(&format!("[default: {d}]")), "{block}"),
            None => assert!(!block.contains("[default:"), "{block}"),
        }
        assert!(
            !block.contains("(default"),
            "a default in the help text: {block}"
        );
        assert_eq!(
            table[id], default,
            "{id}: the table's default, clap's default"
        );
    }
}

/// Given explicitly, each documented default resolves to the configuration of no settings at
/// all: the node runs with what the table says.
#[test]
fn the_documented_defaults_are_what_the_node_runs_with() {
    let none = format!("{:?}", base().resolve().expect("the defaults resolve"));
    for (id, default) in documented_defaults() {
        let Some(default) = default else { continue };
        let flag = format!("--{}", id.replace('_', "-"));
        let mut m = settings_command()
            .mut_args(|a| a.env(None))
            .try_get_matches_from(["settings", flag.as_str(), default.as_str()])
            .unwrap_or_else(|e| panic!("{id}: the flag refuses the documented default: {e}"));
        let given = Options::from_arg_matches_mut(&mut m).expect("parsed");
        let resolved = merge(given, base()).resolve();
        let resolved = resolved.unwrap_or_else(|e| panic!("{id} = {default}: {e}"));
        assert_eq!(format!("{resolved:?}"), none, "{id} = {default}");
    }
}

/// A default clap fills in is no value given: the file's value still applies under it, while a
/// flag given the default's value wins over the file.
#[test]
fn a_default_from_the_command_line_leaves_room_for_the_file() {
    let flags = |args: &[&str]| {
        let m = settings_command().mut_args(|a| a.env(None));
        let m = m.try_get_matches_from(args).expect("valid flags");
        Options::from_arg_matches(&m).expect("parsed")
    };
    let file = parse_file("target_on_site = 7\nkey_file = \"k.pem\"").expect("valid file");
    let none = flags(&["settings"]);
    assert_eq!(none.room.target_on_site, None);
    let c = merge(none, file.clone()).resolve().expect("valid");
    assert_eq!(c.settings.target_on_site, 7);
    let default_given = flags(&["settings", "--target-on-site", "100"]);
    let c = merge(default_given, file).resolve().expect("valid");
    assert_eq!(c.settings.target_on_site, 100);
}
