//! Kubernetes label and field selectors: parsing, validation and matching with the
//! semantics and error texts of k8s.io/apimachinery (`pkg/labels`, `pkg/fields`).

use std::collections::BTreeMap;
use std::fmt;

mod field;
mod label;
mod lexer;
mod matcher;
#[cfg(test)]
mod tests;
mod validate;

pub use field::{escape_value, FieldSelector};
pub use label::LabelSelector;

/// Error from parsing or validating a selector; Display is the exact apiserver message text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

/// Access to an object's labels.
///
/// Object safe: a LIST filters its objects through `&dyn LabelSource`.
pub trait LabelSource {
    /// The value of the label `key`, or `None` when the object does not have it.
    fn label(&self, key: &str) -> Option<&str>;

    /// How many labels (distinct keys) the object has.
    fn label_count(&self) -> usize;

    /// Calls `f` with each label's key and value, in any order, until it returns false.
    /// True when `f` held for every label (as [`Iterator::all`]).
    fn all_labels(&self, f: &mut dyn FnMut(&str, &str) -> bool) -> bool;
}

impl LabelSource for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }

    fn label_count(&self) -> usize {
        self.len()
    }

    fn all_labels(&self, f: &mut dyn FnMut(&str, &str) -> bool) -> bool {
        self.iter().all(|(k, v)| f(k, v))
    }
}

/// Labels as a slice of `(key, value)` pairs sorted by key (looked up by binary search; the
/// tests' second label representation).
#[cfg(test)]
impl LabelSource for [(Box<str>, Box<str>)] {
    fn label(&self, key: &str) -> Option<&str> {
        let i = self.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        self.get(i).map(|(_, v)| &**v)
    }

    fn label_count(&self) -> usize {
        self.len()
    }

    fn all_labels(&self, f: &mut dyn FnMut(&str, &str) -> bool) -> bool {
        self.iter().all(|(k, v)| f(k, v))
    }
}

/// Access to an object's selectable fields (e.g. "metadata.name", "spec.nodeName").
pub trait FieldSource {
    /// The value of the field `name`; `None` compares as the empty string.
    fn field(&self, name: &str) -> Option<&str>;
}

impl FieldSource for BTreeMap<String, String> {
    fn field(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}
