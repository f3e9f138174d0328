//! The environment a configuration reads (`${VAR}`, `.if defined(VAR)`, the `env()`
//! fetch), with the changes its `global` section makes as it is read: `setenv NAME VALUE`,
//! `presetenv NAME VALUE` (only if unset), `unsetenv NAME...` and `resetenv [NAME...]`
//! (everything gone but the names given), applied line by line as HAProxy applies them, so
//! a `${VAR}` after a `setenv VAR` reads the new value.
//!
//! Invariant: the process's own environment is never changed; the changes are the
//! configuration's, and whoever reads a variable through [`Env::get`] sees them.

use std::collections::{BTreeMap, BTreeSet};

/// The changes a configuration made to the environment it started with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// Variables set (`Some`) or removed (`None`) by the configuration.
    changed: BTreeMap<String, Option<String>>,
    /// After a `resetenv`: the only variables of the starting environment still there.
    kept: Option<BTreeSet<String>>,
}

/// The words that change the environment (in `global`).
pub const ENV_KEYWORDS: [&str; 4] = ["setenv", "presetenv", "unsetenv", "resetenv"];

impl Env {
    /// `name` as the configuration sees it, the process's environment under the changes.
    pub fn get(&self, name: &str) -> Option<String> {
        self.lookup(name, &|n| std::env::var(n).ok())
    }

    /// `name` over the starting environment `base`.
    pub fn lookup(&self, name: &str, base: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        if let Some(v) = self.changed.get(name) {
            return v.clone();
        }
        match &self.kept {
            Some(kept) if !kept.contains(name) => None,
            _ => base(name),
        }
    }

    /// Every variable as the configuration sees it, sorted by name.
    pub fn vars(&self) -> Vec<(String, String)> {
        let mut all: BTreeMap<String, String> = std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .filter(|(k, _)| self.kept.as_ref().is_none_or(|kept| kept.contains(k)))
            .collect();
        for (k, v) in &self.changed {
            match v {
                Some(v) => all.insert(k.clone(), v.clone()),
                None => all.remove(k),
            };
        }
        all.into_iter().collect()
    }

    /// Applies a `setenv`, `presetenv`, `unsetenv` or `resetenv` line (its words, the
    /// keyword first) over the starting environment `base`; what is wrong with it if its
    /// arguments are not what the keyword takes.
    pub fn apply(
        &mut self,
        words: &[String],
        base: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), String> {
        let (kw, args) = words.split_first().ok_or("no keyword")?;
        match (kw.as_str(), args) {
            ("setenv", [name, value]) => {
                self.changed.insert(name.clone(), Some(value.clone()));
            }
            ("presetenv", [name, value]) => {
                if self.lookup(name, base).is_none() {
                    self.changed.insert(name.clone(), Some(value.clone()));
                }
            }
            ("setenv" | "presetenv", _) => return Err("expects a name and a value".into()),
            ("unsetenv", []) => return Err("expects at least one name".into()),
            ("unsetenv", names) => {
                for n in names {
                    self.changed.insert(n.clone(), None);
                }
            }
            ("resetenv", names) => {
                let keep: BTreeSet<String> = names.iter().cloned().collect();
                self.changed.retain(|k, _| keep.contains(k));
                self.kept = Some(match self.kept.take() {
                    Some(before) => before.intersection(&keep).cloned().collect(),
                    None => keep,
                });
            }
            (other, _) => return Err(format!("'{other}' does not change the environment")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn changes_apply_in_order_over_the_starting_environment() {
        let base = |n: &str| match n {
            "HOME" => Some("/root".to_string()),
            "PORT" => Some("80".to_string()),
            _ => None,
        };
        let mut e = Env::default();
        e.apply(&w("setenv A 1"), &base).unwrap();
        e.apply(&w("presetenv PORT 8080"), &base).unwrap();
        e.apply(&w("presetenv B 2"), &base).unwrap();
        assert_eq!(e.lookup("A", &base).as_deref(), Some("1"));
        assert_eq!(e.lookup("PORT", &base).as_deref(), Some("80"));
        assert_eq!(e.lookup("B", &base).as_deref(), Some("2"));
        e.apply(&w("unsetenv A HOME"), &base).unwrap();
        assert_eq!(e.lookup("A", &base), None);
        assert_eq!(e.lookup("HOME", &base), None);
        e.apply(&w("resetenv B"), &base).unwrap();
        assert_eq!(e.lookup("PORT", &base), None);
        assert_eq!(e.lookup("B", &base).as_deref(), Some("2"));
        e.apply(&w("setenv PORT 9"), &base).unwrap();
        assert_eq!(e.lookup("PORT", &base).as_deref(), Some("9"));
        assert!(e.apply(&w("setenv X"), &base).is_err());
        assert!(e.apply(&w("unsetenv"), &base).is_err());
    }
}
