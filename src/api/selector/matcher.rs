//! A label selector compiled for matching: its requirements merged per key, so that a match
//! costs one lookup per distinct key, or one pass over the object's labels, however many
//! terms the selector repeats. Matches exactly what the requirements ANDed one by one do.

use ahash::AHashMap;

use super::label::{Op, Requirement};
use super::LabelSource;

/// Up to this many keys are looked up one by one without first counting the object's
/// labels: counting walks the labels once, about what one lookup costs.
const FEW_KEYS: usize = 4;

/// Label values, sorted and free of duplicates.
#[derive(Debug, Clone, Default)]
struct Values(Vec<Box<str>>);

impl Values {
    fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut v: Vec<Box<str>> = values.into_iter().map(Box::from).collect();
        v.sort_unstable();
        v.dedup();
        Values(v)
    }

    fn contains(&self, value: &str) -> bool {
        self.0.binary_search_by(|v| (**v).cmp(value)).is_ok()
    }
}

/// Every requirement on one key, combined.
#[derive(Debug, Clone)]
struct KeyRule {
    /// Some requirement needs the label (`=`, `==`, `in`, exists, `gt`, `lt`).
    present: bool,
    /// `!key`: the label must be absent.
    absent: bool,
    /// `=`, `==` and `in` intersected (less `denied`): the value must be one of these.
    /// `None` when no such requirement.
    allowed: Option<Values>,
    /// `!=` and `notin` united: the value must be none of these. Empty once folded into
    /// `allowed`.
    denied: Values,
    /// The greatest `gt` bound: the value must be an integer above it.
    above: Option<i64>,
    /// The least `lt` bound: the value must be an integer below it.
    below: Option<i64>,
}

impl KeyRule {
    /// `reqs` all have one key.
    fn new(reqs: &[Requirement]) -> Self {
        let (mut present, mut absent) = (false, false);
        let (mut above, mut below) = (None::<i64>, None::<i64>);
        let mut allowed: Option<Values> = None;
        let mut denied: Vec<&str> = Vec::new();
        for r in reqs {
            let values = r.values.iter().map(String::as_str);
            match r.op {
                Op::Equals | Op::DoubleEquals | Op::In => {
                    present = true;
                    allowed = Some(match allowed {
                        None => Values::new(values),
                        Some(Values(mut held)) => {
                            let these = Values::new(values);
                            held.retain(|v| these.contains(v));
                            Values(held)
                        }
                    });
                }
                Op::NotEquals | Op::NotIn => denied.extend(values),
                Op::Exists => present = true,
                Op::DoesNotExist => absent = true,
                Op::GreaterThan(n) => {
                    present = true;
                    above = Some(above.map_or(n, |a| a.max(n)));
                }
                Op::LessThan(n) => {
                    present = true;
                    below = Some(below.map_or(n, |b| b.min(n)));
                }
            }
        }
        let mut denied = Values::new(denied);
        if let Some(Values(held)) = &mut allowed {
            held.retain(|v| !denied.contains(v));
            denied = Values::default();
        }
        KeyRule { present, absent, allowed, denied, above, below }
    }

    /// Whether the label holding `value` satisfies every requirement on the key.
    fn accepts(&self, value: &str) -> bool {
        let bounded = self.above.is_some() || self.below.is_some();
        !self.absent
            && self.allowed.as_ref().is_none_or(|a| a.contains(value))
            && !self.denied.contains(value)
            && (!bounded || value.parse::<i64>().is_ok_and(|n| self.above.is_none_or(|a| n > a) && self.below.is_none_or(|b| n < b)))
    }
}

/// The compiled form of a list of requirements sorted by key.
#[derive(Debug, Clone, Default)]
pub(super) struct Matcher {
    /// Rules of keys that must be present, sorted by key.
    present: Vec<(Box<str>, KeyRule)>,
    /// Rules an absent label satisfies (only `!=`, `notin` and `!key` on their key), by key.
    absent_ok: AHashMap<Box<str>, KeyRule>,
}

impl Matcher {
    /// `reqs` sorted by key.
    pub(super) fn new(reqs: &[Requirement]) -> Self {
        let mut matcher = Matcher::default();
        let keys = reqs.chunk_by(|a, b| a.key == b.key).count();
        if keys > FEW_KEYS {
            matcher.absent_ok.reserve(keys);
        }
        for group in reqs.chunk_by(|a, b| a.key == b.key) {
            let key = group.first().map_or("", |r| r.key.as_str()).into();
            let rule = KeyRule::new(group);
            if rule.present {
                matcher.present.push((key, rule));
            } else {
                matcher.absent_ok.insert(key, rule);
            }
        }
        matcher
    }

    /// True when every requirement matches the labels.
    pub(super) fn matches<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        let mut count = None;
        let mut label_count = || *count.get_or_insert_with(|| labels.label_count());
        // Each present key is a distinct label: more of them than labels cannot all be there.
        if self.present.len() > FEW_KEYS && self.present.len() > label_count() {
            return false;
        }
        if !self.present.iter().all(|(k, r)| labels.label(k).is_some_and(|v| r.accepts(v))) {
            return false;
        }
        if self.absent_ok.len() <= FEW_KEYS || self.absent_ok.len() <= label_count() {
            return self.absent_ok.iter().all(|(k, r)| labels.label(k).is_none_or(|v| r.accepts(v)));
        }
        // More keys than labels: only the keys the object has can fail.
        labels.all_labels(&mut |k, v| self.absent_ok.get(k).is_none_or(|r| r.accepts(v)))
    }
}
