//! The house: `src/`'s rooms (its top-level modules) only look down. The room graph is derived
//! from the code itself (every `crate::` and `super::` path outside `#[cfg(test)]` items,
//! macro bodies included) and held to the order written once in [`kache::ROOMS`]: a room may use
//! the rooms before it, never one after it, so no two rooms form a cycle.
//!
//! `cargo test --test it house_rooms -- --nocapture` prints the graph.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// One use of another room: where it is, and the path as written.
#[derive(Debug, Clone)]
struct Site {
    file: String,
    line: usize,
    path: String,
}

/// From room to the rooms it uses, with the first site of each edge.
type Graph = BTreeMap<String, BTreeMap<String, Site>>;

/// Reads a module's file by its path relative to `src/`.
type Load<'a> = dyn Fn(&Path) -> Option<String> + 'a;

fn is_test_cfg(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text: String = a.meta.require_list().map(|l| l.tokens.to_string()).unwrap_or_default().split_whitespace().collect();
            text.contains("test") && !text.contains("not(")
        }
    })
}

/// The `#[path]` a `mod` item names, if any.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

struct Walker<'a> {
    load: &'a Load<'a>,
    rooms: &'a BTreeSet<String>,
    graph: Graph,
    /// Where each type (struct, enum, union, trait, type alias) outside tests is defined.
    types: BTreeMap<String, Vec<String>>,
    /// Every name the crate defines outside tests: items, methods, variants, fields.
    names: BTreeSet<String>,
    /// How deep in function bodies the walk is (a type local to a function is its own).
    in_block: usize,
    /// Rooms declared at the top of the crate outside `#[cfg(test)]`.
    declared: BTreeSet<String>,
    file: PathBuf,
    /// The current module's path from the crate root.
    module: Vec<String>,
    /// The directory a `mod x;` inside the current module is looked for in.
    dir: PathBuf,
}

impl Walker<'_> {
    /// Record a path whose segments are `segs` (`crate`, `super`, `self` or a name first).
    fn path(&mut self, segs: &[String], line: usize) {
        let room = match segs.first().map(String::as_str) {
            Some("crate") => segs.get(1).cloned(),
            Some("super") => {
                let mut module = self.module.clone();
                let mut rest = segs;
                while rest.first().map(String::as_str) == Some("super") {
                    module.pop();
                    rest = &rest[1..];
                }
                match module.first() {
                    Some(room) => Some(room.clone()),
                    None => rest.first().cloned(),
                }
            }
            _ => None,
        };
        let (Some(room), Some(here)) = (room, self.module.first().cloned()) else { return };
        if room == here || !self.rooms.contains(&room) {
            return;
        }
        let site = Site { file: self.file.display().to_string(), line, path: segs.join("::") };
        self.graph.entry(here).or_default().entry(room).or_insert(site);
    }

    /// Paths inside a token stream (macro bodies): `crate :: a` and `super :: ... :: a`.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            if let TokenTree::Group(g) = &trees[i] {
                self.tokens(g.stream());
            }
            if let TokenTree::Ident(id) = &trees[i] {
                if id == "crate" || id == "super" {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < trees.len() + 1 {
                        match (&trees.get(j), &trees.get(j + 1), &trees.get(j + 2)) {
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next)))
                                if a.as_char() == ':' && b.as_char() == ':' =>
                            {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segs.len() > 1 {
                        self.path(&segs, line);
                    }
                    i = j;
                    continue;
                }
            }
            i += 1;
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.path(prefix, n.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.path(prefix, r.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Glob(g) => {
                prefix.push("*".to_string());
                self.path(prefix, g.star_token.span.start().line);
                prefix.pop();
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// Walk the module in `file` (relative to `src/`), at `module`, whose `mod x;` items are
    /// found in `dir`.
    fn module(&mut self, file: PathBuf, module: Vec<String>, dir: PathBuf) {
        let text = (self.load)(&file).unwrap_or_else(|| panic!("{} is declared but cannot be read", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let saved =
            (std::mem::replace(&mut self.file, file), std::mem::replace(&mut self.module, module), std::mem::replace(&mut self.dir, dir));
        for item in &ast.items {
            self.visit_item(item);
        }
        (self.file, self.module, self.dir) = saved;
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => &[],
        };
        if is_test_cfg(attrs) {
            return;
        }
        let named = match item {
            syn::Item::Const(i) => Some(&i.ident),
            syn::Item::Fn(i) => Some(&i.sig.ident),
            syn::Item::Mod(i) => Some(&i.ident),
            syn::Item::Static(i) => Some(&i.ident),
            syn::Item::Macro(i) => i.ident.as_ref(),
            _ => None,
        };
        if let Some(name) = named {
            self.names.insert(name.to_string());
        }
        let defined = match item {
            syn::Item::Enum(i) => Some(&i.ident),
            syn::Item::Struct(i) => Some(&i.ident),
            syn::Item::Trait(i) => Some(&i.ident),
            syn::Item::Type(i) => Some(&i.ident),
            syn::Item::Union(i) => Some(&i.ident),
            _ => None,
        };
        if let Some(name) = defined {
            self.names.insert(name.to_string());
        }
        if let Some(name) = defined.filter(|_| self.in_block == 0) {
            let at = format!("{}:{}", self.file.display(), name.span().start().line);
            self.types.entry(name.to_string()).or_default().push(at);
        }
        visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        if self.module.is_empty() {
            self.declared.insert(name.clone());
        }
        let mut module = self.module.clone();
        module.push(name.clone());
        match &m.content {
            Some((_, items)) => {
                let dir = self.dir.join(&name);
                let saved = (std::mem::replace(&mut self.module, module), std::mem::replace(&mut self.dir, dir));
                for item in items {
                    self.visit_item(item);
                }
                (self.module, self.dir) = saved;
            }
            None => {
                let (file, dir) = match path_attr(&m.attrs) {
                    Some(p) => {
                        let file = self.dir.join(p);
                        let dir = file.with_extension("");
                        (file, dir)
                    }
                    None => {
                        let flat = self.dir.join(format!("{name}.rs"));
                        if (self.load)(&flat).is_some() {
                            (flat, self.dir.join(&name))
                        } else {
                            (self.dir.join(&name).join("mod.rs"), self.dir.join(&name))
                        }
                    }
                };
                self.module(file, module, dir);
            }
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if is_test_cfg(attrs) {
            return;
        }
        match item {
            syn::ImplItem::Const(i) => self.names.insert(i.ident.to_string()),
            syn::ImplItem::Fn(i) => self.names.insert(i.sig.ident.to_string()),
            syn::ImplItem::Type(i) => self.names.insert(i.ident.to_string()),
            _ => false,
        };
        visit::visit_impl_item(self, item);
    }

    fn visit_block(&mut self, b: &'ast syn::Block) {
        self.in_block += 1;
        visit::visit_block(self, b);
        self.in_block -= 1;
    }

    fn visit_variant(&mut self, v: &'ast syn::Variant) {
        self.names.insert(v.ident.to_string());
        visit::visit_variant(self, v);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.names.insert(f.sig.ident.to_string());
        visit::visit_trait_item_fn(self, f);
    }

    fn visit_field(&mut self, f: &'ast syn::Field) {
        if let Some(name) = &f.ident {
            self.names.insert(name.to_string());
        }
        if !is_test_cfg(&f.attrs) {
            visit::visit_field(self, f);
        }
    }

    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        let attrs: &[syn::Attribute] = match s {
            syn::Stmt::Local(l) => &l.attrs,
            syn::Stmt::Macro(m) => &m.attrs,
            _ => &[],
        };
        if !is_test_cfg(attrs) {
            visit::visit_stmt(self, s);
        }
    }

    /// Paths in attributes, such as clap's `default_value_t = crate::x::Y`.
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        match &a.meta {
            syn::Meta::List(l) => self.tokens(l.tokens.clone()),
            syn::Meta::NameValue(nv) => self.visit_expr(&nv.value),
            syn::Meta::Path(_) => {}
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = p.segments.first() {
            self.path(&segs, first.ident.span().start().line);
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

/// The room graph of the crate whose `lib.rs` `load` reads, over the given rooms, and the
/// rooms `lib.rs` declares outside tests.
fn graph(load: &Load<'_>, rooms: &[&str]) -> (Graph, BTreeSet<String>) {
    let w = walk(load, rooms);
    (w.graph, w.declared)
}

fn walk<'a>(load: &'a Load<'a>, rooms: &[&str]) -> Walker<'a> {
    let rooms: &'a BTreeSet<String> = Box::leak(Box::new(rooms.iter().map(|r| r.to_string()).collect()));
    let mut w = Walker {
        load,
        rooms,
        graph: Graph::new(),
        types: BTreeMap::new(),
        in_block: 0,
        names: BTreeSet::new(),
        declared: BTreeSet::new(),
        file: PathBuf::new(),
        module: Vec::new(),
        dir: PathBuf::new(),
    };
    w.module(PathBuf::from("lib.rs"), Vec::new(), PathBuf::new());
    w
}

/// Every edge that goes up the order (a room using one after it), as readable lines.
fn upward(graph: &Graph, order: &[&str]) -> Vec<String> {
    let rank = |r: &str| order.iter().position(|o| *o == r);
    let mut bad = Vec::new();
    for (from, tos) in graph {
        for (to, site) in tos {
            if rank(to) >= rank(from) {
                bad.push(format!("{from} -> {to}: {}:{} uses `{}`", site.file, site.line, site.path));
            }
        }
    }
    bad
}

fn render(graph: &Graph, order: &[&str]) -> String {
    let mut out = String::new();
    for room in order.iter().rev() {
        let tos: Vec<&str> = graph.get(*room).map(|t| t.keys().map(String::as_str).collect()).unwrap_or_default();
        out.push_str(&format!("{room:>10} -> {}\n", tos.join(", ")));
    }
    out
}

fn src_loader(root: PathBuf) -> impl Fn(&Path) -> Option<String> {
    move |p: &Path| std::fs::read_to_string(root.join(p)).ok()
}

#[test]
fn rooms_only_look_down() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let order = kache::ROOMS;
    // Every room the crate declares, seen by the walker, tests excluded (a room missing from
    // the order would escape the check).
    let every: Vec<&str> = std::fs::read_dir(&src)
        .expect("src/")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let name = name.strip_suffix(".rs").map(str::to_string).unwrap_or(name);
            (!["lib", "main"].contains(&name.as_str())).then_some(name)
        })
        .map(|n| &*Box::leak(n.into_boxed_str()))
        .collect();
    let (graph, declared) = graph(&src_loader(src), &every);
    println!("the room graph, highest first (a room -> the rooms it uses):\n{}", render(&graph, order));
    let missing: Vec<&String> = declared.iter().filter(|d| !order.contains(&d.as_str())).collect();
    assert!(missing.is_empty(), "rooms missing from kache::ROOMS: {missing:?}");
    let unknown: Vec<&&str> = order.iter().filter(|r| !declared.contains(**r)).collect();
    assert!(unknown.is_empty(), "kache::ROOMS names rooms lib.rs does not declare: {unknown:?}");
    let bad = upward(&graph, order);
    assert!(bad.is_empty(), "uses that look up the order {order:?}:\n{}", bad.join("\n"));
}

/// The check itself: a planted upward use, in a path, a `use` group, a macro body or through
/// `super::`, is found; a use inside `#[cfg(test)]` is not.
#[test]
fn rooms_check_finds_a_planted_upward_use() {
    let files: HashMap<PathBuf, &str> = [
        ("lib.rs", "pub mod low; pub mod high; #[cfg(test)] mod testdata;"),
        ("high.rs", "use crate::low::Thing; pub fn f() -> Thing { Thing }"),
        ("testdata.rs", "pub fn x() { crate::high::f(); }"),
    ]
    .into_iter()
    .map(|(p, s)| (PathBuf::from(p), s))
    .collect();
    let order = ["low", "high"];
    let plant = |low: &str| {
        let mut files = files.clone();
        files.insert(PathBuf::from("low/mod.rs"), low);
        files.insert(PathBuf::from("low/deep.rs"), "pub fn g() { super::super::high::f(); }");
        let load = move |p: &Path| files.get(p).map(|s| s.to_string());
        let (graph, declared) = graph(&load, &order);
        assert_eq!(declared, ["high", "low"].into_iter().map(String::from).collect());
        upward(&graph, &order)
    };
    let clean = "pub struct Thing; #[cfg(test)] mod tests { use crate::high::f; } #[cfg(test)] fn t() { crate::high::f(); }";
    let clean_files = {
        let mut files = files.clone();
        files.insert(PathBuf::from("low.rs"), clean);
        files
    };
    let load = move |p: &Path| clean_files.get(p).map(|s| s.to_string());
    assert_eq!(upward(&graph(&load, &order).0, &order), Vec::<String>::new());
    for planted in [
        "pub struct Thing; pub fn g() { crate::high::f(); }",
        "pub struct Thing; use crate::{high::f};",
        "pub struct Thing; pub fn g() { println!(\"{:?}\", crate::high::f()); }",
        "pub struct Thing; mod deep;",
    ] {
        let bad = plant(planted);
        assert_eq!(bad.len(), 1, "{planted}: {bad:?}");
        assert!(bad[0].starts_with("low -> high: low/"), "{planted}: {bad:?}");
    }
}

/// One vocabulary: no type name is defined twice in the crate (tests aside), so a name in
/// the glossary or a log line means one thing.
#[test]
fn no_type_name_is_defined_twice() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let load = src_loader(src);
    let w = walk(&load, kache::ROOMS);
    let twice: Vec<String> = w.types.iter().filter(|(_, at)| at.len() > 1).map(|(name, at)| format!("{name}: {}", at.join(", "))).collect();
    assert!(twice.is_empty(), "type names defined more than once:\n{}", twice.join("\n"));
}

/// The map in lib.rs is true to the code: every name its rooms, words and walks quote in
/// backticks (`serve::Asked::of`, `Feed::prove`, `feed/reflector.rs`) is defined in the
/// crate, or is a file or folder of `src/`.
#[test]
fn lib_rs_names_exist() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let load = src_loader(src.clone());
    let w = walk(&load, kache::ROOMS);
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let doc: String = lib.lines().filter_map(|l| l.strip_prefix("//!")).collect::<Vec<_>>().join(" ");
    let files: Vec<String> = walkdir(&src);
    let mut missing = Vec::new();
    let mut seen = 0;
    for (i, span) in doc.split('`').enumerate() {
        if i % 2 == 0 || span.starts_with('-') || span.contains(' ') {
            continue;
        }
        if span.starts_with('/') || span.starts_with("tests/") {
            continue;
        }
        if span.contains('/') {
            seen += 1;
            let rel = span.trim_end_matches('/');
            if rel != "src"
                && !files.iter().any(|f| {
                    f == rel || f.ends_with(&format!("/{rel}")) || f.starts_with(&format!("{rel}/")) || f.contains(&format!("/{rel}/"))
                })
            {
                missing.push(span.to_string());
            }
            continue;
        }
        let ident = |s: &str| {
            !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !s.starts_with(|c: char| c.is_ascii_digit())
        };
        let segs: Vec<&str> = span.split("::").collect();
        if !segs.iter().all(|s| ident(s)) || span.starts_with("kache_") {
            continue;
        }
        seen += 1;
        if let Some(s) = segs.iter().find(|s| !w.names.contains(**s)) {
            missing.push(format!("{span} ({s})"));
        }
    }
    assert!(seen > 100, "only {seen} names seen in lib.rs");
    assert!(missing.is_empty(), "lib.rs names what the code does not define: {missing:?}");
}

/// Every file and folder under `dir`, relative to it.
fn walkdir(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}
