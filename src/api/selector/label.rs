//! Label selectors: the parser (`labels.Parser`), requirements and their canonical form;
//! matching is the compiled `Matcher`'s.

use std::collections::BTreeSet;
use std::fmt;

use super::lexer::{tokenize, Tok, Token, END};
use super::matcher::Matcher;
use super::validate::{invalid, label_key_errors, label_value_errors};
use super::{LabelSource, SelectorError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

/// One requirement; `values` is sorted and free of duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Requirement {
    pub(super) key: String,
    pub(super) op: Op,
    pub(super) values: Vec<String>,
}

/// In the values context the keywords `in` and `notin` are plain identifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ctx {
    KeyAndOperator,
    Values,
}

pub(super) struct Parser<'a> {
    toks: Vec<Token<'a>>,
    pos: usize,
}

pub(super) fn found(lit: &str, expected: &str) -> String {
    format!("found '{lit}', expected: {expected}")
}

impl<'a> Parser<'a> {
    fn peek(&self, ctx: Ctx) -> (Tok, &'a str) {
        let t = self.toks.get(self.pos).copied().unwrap_or(END);
        let tok = match (ctx, t.tok) {
            (Ctx::Values, Tok::In | Tok::NotIn) => Tok::Ident,
            (_, tok) => tok,
        };
        (tok, t.lit)
    }

    fn next(&mut self, ctx: Ctx) -> (Tok, &'a str) {
        let item = self.peek(ctx);
        self.pos += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.peek(Ctx::Values);
            match tok {
                Tok::Ident | Tok::Bang => {
                    let req = self.requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(req);
                    match self.next(Ctx::Values) {
                        (Tok::End, _) => return Ok(reqs),
                        (Tok::Comma, _) => {
                            let (t2, l2) = self.peek(Ctx::Values);
                            if t2 != Tok::Ident && t2 != Tok::Bang {
                                return Err(found(l2, "identifier after ','"));
                            }
                        }
                        (_, l) => return Err(found(l, "',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => return Err(found(lit, "!, identifier, or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, unary) = self.key_and_inferred_operator()?;
        if let Some(op) = unary {
            return Ok(Requirement { key: key.to_owned(), op, values: Vec::new() });
        }
        let op = self.operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, op, values.into_iter().collect())
    }

    /// The key, and `Exists`/`DoesNotExist` when no binary operator follows.
    fn key_and_inferred_operator(&mut self) -> Result<(&'a str, Option<Op>), String> {
        let (mut tok, mut lit) = self.next(Ctx::Values);
        let negated = tok == Tok::Bang;
        if negated {
            (tok, lit) = self.next(Ctx::Values);
        }
        if tok != Tok::Ident {
            return Err(found(lit, "identifier"));
        }
        let errs = label_key_errors(lit);
        if !errs.is_empty() {
            return Err(invalid("<nil>", lit, &errs.join("; ")));
        }
        let (next, _) = self.peek(Ctx::Values);
        let unary = if negated {
            Some(Op::DoesNotExist)
        } else if matches!(next, Tok::End | Tok::Comma) {
            Some(Op::Exists)
        } else {
            None
        };
        Ok((lit, unary))
    }

    /// Comparison operators carry a placeholder bound until the value is parsed.
    fn operator(&mut self) -> Result<Op, String> {
        match self.next(Ctx::KeyAndOperator) {
            (Tok::In, _) => Ok(Op::In),
            (Tok::NotIn, _) => Ok(Op::NotIn),
            (Tok::Equals, _) => Ok(Op::Equals),
            (Tok::DoubleEquals, _) => Ok(Op::DoubleEquals),
            (Tok::NotEquals, _) => Ok(Op::NotEquals),
            (Tok::Greater, _) => Ok(Op::GreaterThan(0)),
            (Tok::Less, _) => Ok(Op::LessThan(0)),
            (_, lit) => Err(found(lit, "in, notin, =, ==, !=, gt, lt")),
        }
    }

    /// `( v1, v2, ... )`; empty members (`()`, `(,a)`, `(a,)`) mean the empty value.
    fn set_values(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let (tok, lit) = self.next(Ctx::Values);
        if tok != Tok::OpenParen {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.peek(Ctx::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let set = self.identifier_list()?;
                if self.next(Ctx::Values).0 != Tok::CloseParen {
                    return Err(found(lit, "')'"));
                }
                Ok(set)
            }
            Tok::CloseParen => {
                self.next(Ctx::Values);
                Ok(BTreeSet::from([""]))
            }
            _ => Err(found(lit, "',', ')' or identifier")),
        }
    }

    /// Leaves the closing parenthesis unconsumed.
    fn identifier_list(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let mut set = BTreeSet::new();
        loop {
            match self.next(Ctx::Values) {
                (Tok::Ident, lit) => {
                    set.insert(lit);
                    match self.peek(Ctx::Values) {
                        (Tok::Comma, _) => {}
                        (Tok::CloseParen, _) => return Ok(set),
                        (_, l2) => return Err(found(l2, "',' or ')'")),
                    }
                }
                (Tok::Comma, _) => {
                    if set.is_empty() {
                        set.insert("");
                    }
                    match self.peek(Ctx::Values).0 {
                        Tok::CloseParen => {
                            set.insert("");
                            return Ok(set);
                        }
                        Tok::Comma => {
                            self.next(Ctx::Values);
                            set.insert("");
                        }
                        _ => {}
                    }
                }
                (_, lit) => return Err(found(lit, "',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<BTreeSet<&'a str>, String> {
        if matches!(self.peek(Ctx::Values).0, Tok::End | Tok::Comma) {
            return Ok(BTreeSet::from([""]));
        }
        match self.next(Ctx::Values) {
            (Tok::Ident, lit) => Ok(BTreeSet::from([lit])),
            (_, lit) => Err(found(lit, "identifier")),
        }
    }
}

/// Checks the values like labels.NewRequirement (the key was checked while parsing).
pub(super) fn new_requirement(key: &str, op: Op, values: Vec<&str>) -> Result<Requirement, String> {
    let mut errs: Vec<String> = Vec::new();
    let mut op = op;
    if let Op::GreaterThan(_) | Op::LessThan(_) = op {
        for (i, v) in values.iter().enumerate() {
            match v.parse::<i64>() {
                Ok(n) if matches!(op, Op::GreaterThan(_)) => op = Op::GreaterThan(n),
                Ok(n) => op = Op::LessThan(n),
                Err(_) => errs.push(invalid(&format!("values[{i}]"), v, "for 'Gt', 'Lt' operators, the value must be an integer")),
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let problems = label_value_errors(v);
        if !problems.is_empty() {
            errs.push(invalid(&format!("values[{i}][{key}]"), v, &problems.join("; ")));
        }
    }
    errs.dedup();
    match errs.len() {
        0 => Ok(Requirement { key: key.to_owned(), op, values: values.into_iter().map(str::to_owned).collect() }),
        1 => Err(errs.concat()),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map_or("", String::as_str);
        match self.op {
            Op::Exists => write!(f, "{}", self.key),
            Op::DoesNotExist => write!(f, "!{}", self.key),
            Op::Equals => write!(f, "{}={first}", self.key),
            Op::DoubleEquals => write!(f, "{}=={first}", self.key),
            Op::NotEquals => write!(f, "{}!={first}", self.key),
            Op::GreaterThan(_) => write!(f, "{}>{first}", self.key),
            Op::LessThan(_) => write!(f, "{}<{first}", self.key),
            Op::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Op::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

/// A parsed label selector: an AND of requirements, sorted by key, and their compiled form.
#[derive(Clone, Default)]
pub struct LabelSelector {
    /// Every requirement as parsed, for the canonical form.
    reqs: Vec<Requirement>,
    matcher: Matcher,
}

/// Equal when the requirements are (the matcher follows from them).
impl PartialEq for LabelSelector {
    fn eq(&self, other: &Self) -> bool {
        self.reqs == other.reqs
    }
}

impl Eq for LabelSelector {}

impl fmt::Debug for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LabelSelector").field("reqs", &self.reqs).finish_non_exhaustive()
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` syntax; "" or only whitespace matches everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser { toks: tokenize(s), pos: 0 };
        let mut reqs = parser.parse().map_err(SelectorError)?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        let matcher = Matcher::new(&reqs);
        Ok(Self { reqs, matcher })
    }

    /// True when the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// True when every requirement matches the labels.
    pub fn matches<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        self.matcher.matches(labels)
    }
}

/// The apiserver's canonical form (requirements by key, set values sorted); it parses back.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_joined(f, &self.reqs)
    }
}

pub(super) fn write_joined<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}
