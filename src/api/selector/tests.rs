//! Selector behaviour against the apimachinery texts and semantics.

use super::field::escape_value;
use super::validate::label_value_errors;
use super::*;
use proptest::prelude::*;

const NAME_RE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' \
or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', \
regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN_RE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation \
is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const INT_ERR: &str = "for 'Gt', 'Lt' operators, the value must be an integer";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn sel(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn label_err(s: &str) -> String {
    match LabelSelector::parse(s) {
        Ok(v) => panic!("{s:?} should fail, parsed as {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn fsel(s: &str) -> FieldSelector {
    FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn field_err(s: &str) -> String {
    match FieldSelector::parse(s) {
        Ok(v) => panic!("{s:?} should fail, parsed as {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// Label selector `s` against labels, both ways of supplying labels.
fn lm(s: &str, pairs: &[(&str, &str)]) -> bool {
    let map = labels(pairs);
    let mut slice: Vec<(Box<str>, Box<str>)> = pairs.iter().map(|(k, v)| (Box::from(*k), Box::from(*v))).collect();
    slice.sort();
    let selector = sel(s);
    let by_map = selector.matches(&map);
    assert_eq!(by_map, selector.matches(slice.as_slice()), "map vs slice for {s:?}");
    by_map
}

// ----- label selectors: operators and matching -----

#[test]
fn matches_besides_skips_only_the_known_equality() {
    let f = FieldSelector::parse("spec.nodeName=a,spec.nodeName!=b,status.phase=Running").unwrap();
    let obj: BTreeMap<String, String> =
        [("spec.nodeName", "zzz"), ("status.phase", "Running")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert!(!f.matches(&obj));
    assert!(f.matches_besides(&obj, Some(("spec.nodeName", "a"))), "the known term is taken as held");
    assert!(!f.matches_besides(&obj, Some(("spec.nodeName", "c"))), "another value is still checked");
    let both = FieldSelector::parse("spec.nodeName=a,spec.nodeName=b").unwrap();
    assert!(!both.matches_besides(&obj, Some(("spec.nodeName", "a"))), "a second equality on the field is still checked");
}

#[test]
fn empty_and_whitespace_match_everything() {
    for s in ["", " ", "\t\r\n ", "  \n"] {
        let sel = sel(s);
        assert!(sel.is_empty());
        assert!(sel.matches(&labels(&[])));
        assert!(sel.matches(&labels(&[("a", "b")])));
        assert_eq!(sel.to_string(), "");
    }
    assert!(LabelSelector::default().is_empty());
    assert!(!sel("a").is_empty());
}

#[test]
fn equality_operators() {
    for s in ["a=b", "a==b", " a = b ", "a\t==\tb"] {
        assert!(lm(s, &[("a", "b")]), "{s}");
        assert!(lm(s, &[("a", "b"), ("c", "d")]), "{s}");
        assert!(!lm(s, &[("a", "c")]), "{s}");
        assert!(!lm(s, &[]), "{s}");
    }
    assert!(lm("a=", &[("a", "")]));
    assert!(!lm("a=", &[]));
    assert!(!lm("a=", &[("a", "x")]));
}

#[test]
fn not_equals_matches_missing_label() {
    assert!(lm("a!=b", &[]));
    assert!(lm("a!=b", &[("a", "c")]));
    assert!(!lm("a!=b", &[("a", "b")]));
    assert!(lm("a != ", &[("a", "x")]));
    assert!(!lm("a!=", &[("a", "")]));
}

#[test]
fn set_operators() {
    assert!(lm("a in (x,y)", &[("a", "y")]));
    assert!(!lm("a in (x,y)", &[("a", "z")]));
    assert!(!lm("a in (x,y)", &[]));
    assert!(lm("a notin (x,y)", &[]));
    assert!(lm("a notin (x,y)", &[("a", "z")]));
    assert!(!lm("a notin (x,y)", &[("a", "x")]));
    assert!(lm("a in ( x , y )", &[("a", "x")]));
    assert!(lm("a in(x)", &[("a", "x")]));
    assert!(lm("a notin(x)", &[("a", "y")]));
}

#[test]
fn set_with_empty_values() {
    assert!(lm("a in ()", &[("a", "")]));
    assert!(!lm("a in ()", &[("a", "x")]));
    assert!(lm("a in (,x)", &[("a", "")]));
    assert!(lm("a in (x,)", &[("a", "")]));
    assert!(lm("a in (x,,y)", &[("a", "")]));
    assert!(lm("a in (x,,y)", &[("a", "y")]));
    assert!(lm("a in (,)", &[("a", "")]));
    assert_eq!(sel("a in (x,,y)").to_string(), "a in (,x,y)");
    assert_eq!(sel("a in (y,x,y)").to_string(), "a in (x,y)");
    assert_eq!(sel("a notin ()").to_string(), "a notin ()");
}

#[test]
fn exists_and_does_not_exist() {
    assert!(lm("a", &[("a", "")]));
    assert!(!lm("a", &[("b", "")]));
    assert!(lm("!a", &[("b", "")]));
    assert!(!lm("!a", &[("a", "x")]));
    assert!(lm("! a", &[]));
    assert!(lm("a,!b", &[("a", "1")]));
    assert!(!lm("a,!b", &[("a", "1"), ("b", "2")]));
}

#[test]
fn numeric_comparisons() {
    assert!(lm("a>1", &[("a", "2")]));
    assert!(!lm("a>1", &[("a", "1")]));
    assert!(!lm("a>1", &[("a", "x")]));
    assert!(!lm("a>1", &[]));
    assert!(lm("a<5", &[("a", "-3")]));
    assert!(lm("a < 5", &[("a", "+4")]));
    assert!(!lm("a<5", &[("a", "5")]));
    assert!(!lm("a<5", &[("a", "")]));
    assert!(!lm("a<5", &[("a", "99999999999999999999")]));
    assert!(lm("a>007", &[("a", "8")]));
    assert_eq!(sel("a>007").to_string(), "a>007");
}

#[test]
fn conjunction_and_ordering() {
    let s = sel("b=1, a in (y,x) ,!c,d");
    assert_eq!(s.to_string(), "a in (x,y),b=1,!c,d");
    assert!(s.matches(&labels(&[("a", "x"), ("b", "1"), ("d", "")])));
    assert!(!s.matches(&labels(&[("a", "x"), ("b", "1")])));
    assert!(!s.matches(&labels(&[("a", "x"), ("b", "1"), ("c", ""), ("d", "")])));
}

#[test]
fn keywords_as_keys_and_values() {
    assert!(lm("in=notin", &[("in", "notin")]));
    assert!(lm("notin in (in,notin)", &[("notin", "in")]));
    assert!(lm("in", &[("in", "")]));
    assert!(lm("!notin", &[]));
    assert!(lm("x in (in)", &[("x", "in")]));
}

#[test]
fn prefixed_keys() {
    assert!(lm("app.kubernetes.io/name=web", &[("app.kubernetes.io/name", "web")]));
    assert!(lm("example.com/a_b-c.d", &[("example.com/a_b-c.d", "")]));
    let long_name = "a".repeat(63);
    assert!(lm(&format!("{long_name}={long_name}"), &[(&long_name, &long_name)]));
}

#[test]
fn display_forms() {
    for (input, shown) in [
        ("a==b", "a==b"),
        ("a = b", "a=b"),
        ("a!=", "a!="),
        ("!a", "!a"),
        ("a>5", "a>5"),
        ("a<5", "a<5"),
        ("a notin (b)", "a notin (b)"),
        ("in in (in)", "in in (in)"),
    ] {
        assert_eq!(sel(input).to_string(), shown);
        assert_eq!(sel(shown), sel(input));
    }
}

#[test]
fn repeated_keys_are_merged_for_matching_but_shown_term_by_term() {
    let s = sel("a!=x,!b,a notin (y,z),a!=x,!b,c,c in (1,2),c=2");
    assert_eq!(s.to_string(), "a!=x,a notin (y,z),a!=x,!b,!b,c,c in (1,2),c=2");
    assert!(s.matches(&labels(&[("c", "2")])));
    assert!(s.matches(&labels(&[("a", "w"), ("c", "2")])));
    for bad in [&[("a", "x"), ("c", "2")][..], &[("a", "z"), ("c", "2")], &[("b", ""), ("c", "2")], &[("c", "1")], &[]] {
        assert!(!lm(&s.to_string(), bad), "{bad:?}");
    }
    assert!(!lm("a,!a", &[("a", "")]) && !lm("a,!a", &[]));
    assert!(!lm("a=x,a=y", &[("a", "x")]));
    assert!(lm("a in (x,y),a in (y,z)", &[("a", "y")]));
    assert!(!lm("a in (x,y),a!=y", &[("a", "y")]));
    assert!(lm("a>1,a>3,a<9,a<7", &[("a", "4")]));
    assert!(!lm("a>1,a>3,a<9,a<7", &[("a", "3")]) && !lm("a>1,a>3,a<9,a<7", &[("a", "7")]));
}

#[test]
fn many_absent_ok_keys_against_few_labels() {
    let s = sel(&(0..50).map(|i| format!("!k{i},k{i}!=v")).collect::<Vec<_>>().join(","));
    assert!(lm(&s.to_string(), &[]));
    assert!(lm(&s.to_string(), &[("a", "1"), ("k50", "v")]));
    assert!(!lm(&s.to_string(), &[("a", "1"), ("k49", "w")]));
    let ne = sel(&(0..50).map(|i| format!("k{i}!=v")).collect::<Vec<_>>().join(","));
    assert!(ne.matches(&labels(&[("k1", "w"), ("k7", "x")])));
    assert!(!ne.matches(&labels(&[("k1", "w"), ("k7", "v")])));
    let present = sel(&(0..10).map(|i| format!("k{i}")).collect::<Vec<_>>().join(","));
    assert!(!present.matches(&labels(&[("k1", ""), ("k2", "")])));
    let all: Vec<(String, String)> = (0..10).map(|i| (format!("k{i}"), String::new())).collect();
    assert!(present.matches(&all.into_iter().collect::<BTreeMap<_, _>>()));
}

#[test]
fn nul_bytes_behave_like_the_go_lexer() {
    // NUL right after a word or operator separates tokens; at a token start it ends the input.
    assert_eq!(sel("a=\0b"), sel("a=b"));
    assert_eq!(sel("a \0b=c"), sel("a"));
    assert_eq!(label_err("a\0b"), "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt");
}

#[test]
fn label_source_slice_uses_sorted_keys() {
    let slice: Vec<(Box<str>, Box<str>)> = vec![("a".into(), "1".into()), ("c".into(), "3".into()), ("e".into(), "5".into())];
    let s = slice.as_slice();
    assert_eq!(s.label("a"), Some("1"));
    assert_eq!(s.label("c"), Some("3"));
    assert_eq!(s.label("e"), Some("5"));
    assert_eq!(s.label("b"), None);
    assert_eq!(s.label(""), None);
    let empty: &[(Box<str>, Box<str>)] = &[];
    assert_eq!(empty.label("a"), None);
}

// ----- label selectors: syntax errors -----

#[test]
fn error_unterminated_set() {
    assert_eq!(label_err("a in ("), "unable to parse requirement: found '', expected: ',', ')' or identifier");
    assert_eq!(label_err("a in (="), "unable to parse requirement: found '=', expected: ',', ')' or identifier");
}

#[test]
fn error_selector_level() {
    assert_eq!(label_err(",a"), "found ',', expected: !, identifier, or 'end of string'");
    assert_eq!(label_err("=a"), "found '=', expected: !, identifier, or 'end of string'");
    assert_eq!(label_err("!=a"), "found '!=', expected: !, identifier, or 'end of string'");
    assert_eq!(label_err(")"), "found ')', expected: !, identifier, or 'end of string'");
    assert_eq!(label_err("a,"), "found '', expected: identifier after ','");
    assert_eq!(label_err("a,,b"), "found ',', expected: identifier after ','");
    assert_eq!(label_err("a=b c"), "found 'c', expected: ',' or 'end of string'");
    assert_eq!(label_err("a=b)"), "found ')', expected: ',' or 'end of string'");
    assert_eq!(label_err("!a=b"), "found '=', expected: ',' or 'end of string'");
    assert_eq!(label_err("a in (b) c"), "found 'c', expected: ',' or 'end of string'");
}

#[test]
fn error_requirement_level() {
    let cases = [
        ("!!a", "found '!', expected: identifier"),
        ("!", "found '', expected: identifier"),
        ("!,a", "found ',', expected: identifier"),
        ("a b", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a (", "found '(', expected: in, notin, =, ==, !=, gt, lt"),
        ("a !b", "found '!', expected: in, notin, =, ==, !=, gt, lt"),
        ("a in b", "found 'b' expected: '('"),
        ("a in", "found '' expected: '('"),
        ("a notin ,", "found ',' expected: '('"),
        ("a in (b c)", "found 'c', expected: ',' or ')'"),
        ("a in (b", "found '', expected: ',' or ')'"),
        ("a in (b,", "found '', expected: ',', or identifier"),
        ("a in (b,=)", "found '=', expected: ',', or identifier"),
        ("a in (,,)", "found ')', expected: ',', or identifier"),
        ("a in (b,,)", "found ')', expected: ',', or identifier"),
        ("a===", "found '=', expected: identifier"),
        ("a=(", "found '(', expected: identifier"),
        ("a!=!", "found '!', expected: identifier"),
        ("a>)", "found ')', expected: identifier"),
    ];
    for (input, msg) in cases {
        assert_eq!(label_err(input), format!("unable to parse requirement: {msg}"), "{input:?}");
    }
}

// ----- label selectors: key and value validation -----

#[test]
fn error_invalid_key_name() {
    assert_eq!(
        label_err("app:monolith"),
        format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": name part {NAME_RE}")
    );
    assert_eq!(label_err("-a=b"), format!("unable to parse requirement: <nil>: Invalid value: \"-a\": name part {NAME_RE}"));
    let long = "a".repeat(64);
    assert_eq!(
        label_err(&long),
        format!("unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 bytes")
    );
}

#[test]
fn error_invalid_key_prefix() {
    assert_eq!(
        label_err("app.kubernetes_io/name=x"),
        format!("unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": prefix part {SUBDOMAIN_RE}")
    );
    assert_eq!(label_err("/a"), "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty");
    assert_eq!(
        label_err("a/"),
        format!("unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; name part {NAME_RE}")
    );
    let prefix = "a".repeat(254);
    assert_eq!(
        label_err(&format!("{prefix}/x")),
        format!("unable to parse requirement: <nil>: Invalid value: \"{prefix}/x\": prefix part must be no more than 253 bytes")
    );
    assert_eq!(
        label_err("a/b/c"),
        format!(
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a valid label key {NAME_RE} \
with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        )
    );
}

#[test]
fn error_key_is_go_quoted() {
    assert_eq!(label_err("a\"b\\"), format!("unable to parse requirement: <nil>: Invalid value: \"a\\\"b\\\\\": name part {NAME_RE}"));
    assert_eq!(
        label_err("\u{1}x\u{a0}é"),
        format!("unable to parse requirement: <nil>: Invalid value: \"\\x01x\\u00a0é\": name part {NAME_RE}")
    );
}

#[test]
fn error_invalid_values() {
    assert_eq!(
        label_err("app=demo-{nginx}"),
        format!("unable to parse requirement: values[0][app]: Invalid value: \"demo-{{nginx}}\": {VALUE_RE}")
    );
    let long = "v".repeat(64);
    assert_eq!(
        label_err(&format!("a!={long}")),
        format!("unable to parse requirement: values[0][a]: Invalid value: \"{long}\": must be no more than 63 bytes")
    );
    let long_bad = format!("{long}-");
    assert_eq!(
        label_err(&format!("a=={long_bad}")),
        format!("unable to parse requirement: values[0][a]: Invalid value: \"{long_bad}\": must be no more than 63 bytes; {VALUE_RE}")
    );
    assert_eq!(
        label_err("k in (ok,-y,-x)"),
        format!(
            "unable to parse requirement: [values[0][k]: Invalid value: \"-x\": {VALUE_RE}, \
values[1][k]: Invalid value: \"-y\": {VALUE_RE}]"
        )
    );
}

#[test]
fn error_numeric_values() {
    assert_eq!(label_err("environment>qa"), format!("unable to parse requirement: values[0]: Invalid value: \"qa\": {INT_ERR}"));
    assert_eq!(label_err("a<"), format!("unable to parse requirement: values[0]: Invalid value: \"\": {INT_ERR}"));
    assert_eq!(
        label_err("a>99999999999999999999"),
        format!("unable to parse requirement: values[0]: Invalid value: \"99999999999999999999\": {INT_ERR}")
    );
    assert_eq!(label_err("a>-1"), format!("unable to parse requirement: values[0][a]: Invalid value: \"-1\": {VALUE_RE}"));
    assert_eq!(
        label_err("a<-x"),
        format!(
            "unable to parse requirement: [values[0]: Invalid value: \"-x\": {INT_ERR}, \
values[0][a]: Invalid value: \"-x\": {VALUE_RE}]"
        )
    );
}

#[test]
fn error_type_traits() {
    let e = LabelSelector::parse("a in (").err().unwrap_or_else(|| SelectorError(String::new()));
    let boxed: Box<dyn std::error::Error> = Box::new(e.clone());
    assert_eq!(boxed.to_string(), e.0);
}

// ----- field selectors -----

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels(pairs)
}

#[test]
fn field_empty_selectors() {
    for s in ["", ",", ",,,", "=", "!=", "=,!="] {
        let f = fsel(s);
        assert!(f.is_empty(), "{s:?}");
        assert!(f.matches(&fields(&[])));
        assert_eq!(f.to_string(), "");
    }
    assert!(FieldSelector::default().is_empty());
}

#[test]
fn field_operators() {
    let node = fields(&[("spec.nodeName", "n1"), ("metadata.name", "p")]);
    assert!(fsel("spec.nodeName=n1").matches(&node));
    assert!(fsel("spec.nodeName==n1").matches(&node));
    assert!(!fsel("spec.nodeName!=n1").matches(&node));
    assert!(fsel("spec.nodeName!=n2").matches(&node));
    assert!(fsel("spec.nodeName=n1,metadata.name=p").matches(&node));
    assert!(!fsel("spec.nodeName=n1,metadata.name=q").matches(&node));
    assert!(fsel(",spec.nodeName=n1,,").matches(&node));
}

#[test]
fn field_missing_compares_as_empty() {
    let none = fields(&[]);
    assert!(fsel("spec.nodeName=").matches(&none));
    assert!(fsel("spec.nodeName==").matches(&none));
    assert!(!fsel("spec.nodeName!=").matches(&none));
    assert!(fsel("spec.nodeName!=n1").matches(&none));
    assert!(!fsel("spec.nodeName=n1").matches(&none));
    assert!(fsel("spec.nodeName=").matches(&fields(&[("spec.nodeName", "")])));
}

#[test]
fn field_whitespace_is_significant() {
    let f = fsel("a = b");
    assert_eq!(f.fields().collect::<Vec<_>>(), ["a "]);
    assert_eq!(f.exact("a "), Some(" b"));
    assert!(f.matches(&fields(&[("a ", " b")])));
    assert!(!f.matches(&fields(&[("a", "b")])));
}

#[test]
fn field_escapes() {
    assert_eq!(fsel(r"a=b\,c").exact("a"), Some("b,c"));
    assert_eq!(fsel(r"a=b\=c").exact("a"), Some("b=c"));
    assert_eq!(fsel(r"a=b\\c").exact("a"), Some(r"b\c"));
    assert_eq!(fsel(r"a=\\").exact("a"), Some("\\"));
    assert_eq!(fsel(r"a=x\,y,b=z").exact("b"), Some("z"));
    assert_eq!(fsel("a=!x").exact("a"), Some("!x"));
    let f = fsel(r"a=b\,c\=d\\");
    assert_eq!(f.to_string(), r"a=b\,c\=d\\");
    assert!(f.matches(&fields(&[("a", r"b,c=d\")])));
    // Escapes in the field name are kept verbatim.
    assert_eq!(fsel(r"x\,y=1").fields().collect::<Vec<_>>(), [r"x\,y"]);
}

#[test]
fn field_errors() {
    assert_eq!(field_err("x"), "invalid selector: 'x'; can't understand 'x'");
    assert_eq!(field_err("a=b,foo"), "invalid selector: 'a=b,foo'; can't understand 'foo'");
    assert_eq!(field_err("a!b"), "invalid selector: 'a!b'; can't understand 'a!b'");
    assert_eq!(field_err(r"a\,b"), r"invalid selector: 'a\,b'; can't understand 'a\,b'");
    assert_eq!(field_err("a=b=c"), "invalid field selector: unescaped character in value: 61");
    assert_eq!(field_err("a!==b"), "invalid field selector: unescaped character in value: 61");
    assert_eq!(field_err("a===b"), "invalid field selector: unescaped character in value: 61");
    assert_eq!(field_err(r"a=b\x"), r"invalid field selector: invalid escape sequence: \x");
    assert_eq!(field_err(r"a=b\é"), r"invalid field selector: invalid escape sequence: \é");
    assert_eq!(field_err(r"a=b\"), r"invalid field selector: invalid escape sequence: \");
    assert_eq!(field_err(r"a=b\,c\"), r"invalid field selector: invalid escape sequence: \");
}

#[test]
fn field_errors_follow_sorted_term_order() {
    // The apiserver sorts the terms before parsing them: 'a' is reported before 'z'.
    assert_eq!(field_err("z,a"), "invalid selector: 'z,a'; can't understand 'a'");
    assert_eq!(field_err(r"z=\q,a=1=2"), "invalid field selector: unescaped character in value: 61");
}

#[test]
fn field_exact_and_fields() {
    let f = fsel("spec.nodeName=n1,metadata.name!=x,status.phase==Running");
    assert_eq!(f.exact("spec.nodeName"), Some("n1"));
    assert_eq!(f.exact("status.phase"), Some("Running"));
    assert_eq!(f.exact("metadata.name"), None);
    assert_eq!(f.exact("metadata.namespace"), None);
    assert_eq!(f.fields().collect::<Vec<_>>(), ["metadata.name", "spec.nodeName", "status.phase"]);
    assert_eq!(f.to_string(), "metadata.name!=x,spec.nodeName=n1,status.phase=Running");
    assert_eq!(fsel("spec.nodeName=").exact("spec.nodeName"), Some(""));
}

#[test]
fn field_validate() {
    let supported = ["metadata.name", "metadata.namespace", "spec.nodeName"];
    assert_eq!(fsel("spec.nodeName=a,metadata.name!=b").validate(&supported), Ok(()));
    assert_eq!(fsel("").validate(&supported), Ok(()));
    assert_eq!(
        fsel("spec.nodeName=a,spec.bogus=b").validate(&supported),
        Err(SelectorError("field label not supported: spec.bogus".to_owned()))
    );
    assert_eq!(fsel("=x").validate(&supported), Err(SelectorError("field label not supported: ".to_owned())));
}

#[test]
fn field_display_round_trips() {
    for s in [r"b=2,a!=1", r"a==x\,y", r"a\=b", r"a\!=b", r"a\=,c=d", r"x!!=y", "=v", "a=", "a!="] {
        let f = fsel(s);
        assert_eq!(fsel(&f.to_string()), f, "{s:?} -> {f}");
    }
}

// ----- properties -----

#[derive(Debug, Clone)]
enum RefOp {
    Eq(String),
    DoubleEq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone)]
struct RefReq {
    key: String,
    op: RefOp,
    ws: String,
}

const KEYS: &[&str] = &["a", "b", "x.io/c", "in"];
const VALUES: &[&str] = &["", "x", "y", "1", "2", "10", "in", "-3", "+4", "abc"];

fn key() -> impl Strategy<Value = String> {
    proptest::sample::select(KEYS).prop_map(str::to_owned)
}

fn value() -> impl Strategy<Value = String> {
    // Values of labels; the selector side uses the valid ones.
    proptest::sample::select(VALUES).prop_map(str::to_owned)
}

fn selector_value() -> impl Strategy<Value = String> {
    value().prop_filter("valid label value", |v| label_value_errors(v).is_empty())
}

fn value_set() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::btree_set(selector_value(), 1..4).prop_map(|s| s.into_iter().collect())
}

fn ref_op() -> impl Strategy<Value = RefOp> {
    prop_oneof![
        selector_value().prop_map(RefOp::Eq),
        selector_value().prop_map(RefOp::DoubleEq),
        selector_value().prop_map(RefOp::Ne),
        value_set().prop_map(RefOp::In),
        value_set().prop_map(RefOp::NotIn),
        Just(RefOp::Exists),
        Just(RefOp::NotExists),
        (0i64..12).prop_map(RefOp::Gt),
        (0i64..12).prop_map(RefOp::Lt),
    ]
}

fn ref_req() -> impl Strategy<Value = RefReq> {
    let ws = proptest::sample::select(&["", " ", "\t", " \n "][..]).prop_map(str::to_owned);
    (key(), ref_op(), ws).prop_map(|(key, op, ws)| RefReq { key, op, ws })
}

fn render(reqs: &[RefReq]) -> String {
    let parts: Vec<String> = reqs
        .iter()
        .map(|r| {
            let (k, w) = (&r.key, &r.ws);
            match &r.op {
                RefOp::Eq(v) => format!("{w}{k}{w}={w}{v}{w}"),
                RefOp::DoubleEq(v) => format!("{k}{w}=={w}{v}"),
                RefOp::Ne(v) => format!("{w}{k}!={v}"),
                RefOp::In(vs) => format!("{k} in{w}({w}{}{w}){w}", vs.join(",")),
                RefOp::NotIn(vs) => format!("{w}{k} notin ({})", vs.join(&format!("{w},{w}"))),
                RefOp::Exists => format!("{w}{k}{w}"),
                RefOp::NotExists => format!("!{w}{k}"),
                RefOp::Gt(n) => format!("{k}{w}>{w}{n}"),
                RefOp::Lt(n) => format!("{k}<{n}{w}"),
            }
        })
        .collect();
    parts.join(",")
}

fn reference_matches(reqs: &[RefReq], labels: &BTreeMap<String, String>) -> bool {
    reqs.iter().all(|r| {
        let got = labels.get(&r.key).map(String::as_str);
        let num = got.and_then(|v| v.parse::<i64>().ok());
        match &r.op {
            RefOp::Eq(v) | RefOp::DoubleEq(v) => got == Some(v.as_str()),
            RefOp::Ne(v) => got != Some(v.as_str()),
            RefOp::In(vs) => got.is_some_and(|g| vs.iter().any(|v| v == g)),
            RefOp::NotIn(vs) => !got.is_some_and(|g| vs.iter().any(|v| v == g)),
            RefOp::Exists => got.is_some(),
            RefOp::NotExists => got.is_none(),
            RefOp::Gt(n) => num.is_some_and(|g| g > *n),
            RefOp::Lt(n) => num.is_some_and(|g| g < *n),
        }
    })
}

/// A larger key pool than [`KEYS`], so that selectors name more keys than objects have
/// labels.
const MANY_KEYS: &[&str] = &["a", "b", "x.io/c", "in", "k1", "k2", "k3", "k4", "k5", "k6"];

/// Requirements an absent label satisfies: the terms a hostile selector repeats.
fn absent_ok_op() -> impl Strategy<Value = RefOp> {
    prop_oneof![selector_value().prop_map(RefOp::Ne), value_set().prop_map(RefOp::NotIn), Just(RefOp::NotExists)]
}

/// Mostly terms an absent label satisfies, over many keys; any term on `a` and `b`.
fn repeated_req() -> impl Strategy<Value = RefReq> {
    let any = (proptest::sample::select(&["a", "b"][..]), ref_op());
    let absent_ok = (proptest::sample::select(MANY_KEYS), absent_ok_op());
    prop_oneof![1 => any, 3 => absent_ok].prop_map(|(key, op)| RefReq { key: key.to_owned(), op, ws: String::new() })
}

fn many_key_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(proptest::sample::select(MANY_KEYS).prop_map(str::to_owned), value(), 0..7)
}

fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(key(), value(), 0..4)
}

/// Strings from selector-ish fragments, so that many of them parse.
fn label_soup() -> impl Strategy<Value = String> {
    let atoms = &["a", "b", "in", "notin", "=", "==", "!=", "!", "(", ")", ",", ">", "<", "1", "-", "x/", " ", "\t", "\0"][..];
    proptest::collection::vec(proptest::sample::select(atoms), 0..14).prop_map(|v| v.concat())
}

fn field_soup() -> impl Strategy<Value = String> {
    let atoms = &["a", "b.c", "=", "==", "!=", "!", ",", "\\", "\\,", "\\=", "\\\\", " ", "é"][..];
    proptest::collection::vec(proptest::sample::select(atoms), 0..14).prop_map(|v| v.concat())
}

#[derive(Debug, Clone)]
struct RefTerm {
    field: String,
    value: String,
    op: &'static str,
}

fn ref_term() -> impl Strategy<Value = RefTerm> {
    let field = proptest::sample::select(&["f", "g.h", "spec.nodeName"][..]).prop_map(str::to_owned);
    let op = proptest::sample::select(&["=", "==", "!="][..]);
    (field, "[ab,=\\\\! ]{0,4}", op).prop_map(|(field, value, op)| RefTerm { field, value, op })
}

proptest! {
    #[test]
    fn label_matching_agrees_with_reference(
        reqs in proptest::collection::vec(ref_req(), 0..5),
        labels in label_map(),
    ) {
        let text = render(&reqs);
        let selector = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(selector.is_empty(), reqs.is_empty());
        prop_assert_eq!(selector.matches(&labels), reference_matches(&reqs, &labels), "{:?}", text);
        let slice: Vec<(Box<str>, Box<str>)> =
            labels.iter().map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str()))).collect();
        prop_assert_eq!(selector.matches(slice.as_slice()), selector.matches(&labels));
    }

    #[test]
    fn label_display_round_trips(reqs in proptest::collection::vec(ref_req(), 0..5)) {
        let selector = sel(&render(&reqs));
        prop_assert_eq!(sel(&selector.to_string()), selector);
    }

    #[test]
    fn label_parse_never_panics_and_round_trips(s in label_soup()) {
        if let Ok(selector) = LabelSelector::parse(&s) {
            let shown = selector.to_string();
            prop_assert_eq!(LabelSelector::parse(&shown), Ok(selector), "{:?} -> {:?}", s, shown);
        }
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_strings(s in any::<String>()) {
        if let Ok(selector) = LabelSelector::parse(&s) {
            let _ = selector.matches(&BTreeMap::new());
            prop_assert_eq!(LabelSelector::parse(&selector.to_string()), Ok(selector));
        }
        if let Ok(selector) = FieldSelector::parse(&s) {
            let _ = selector.matches(&BTreeMap::new());
            prop_assert_eq!(FieldSelector::parse(&selector.to_string()), Ok(selector));
        }
    }

    #[test]
    fn field_parse_never_panics_and_round_trips(s in field_soup()) {
        if let Ok(selector) = FieldSelector::parse(&s) {
            let shown = selector.to_string();
            prop_assert_eq!(FieldSelector::parse(&shown), Ok(selector), "{:?} -> {:?}", s, shown);
        }
    }

    #[test]
    fn field_matching_agrees_with_reference(
        terms in proptest::collection::vec(ref_term(), 0..5),
        object in proptest::collection::btree_map(
            proptest::sample::select(&["f", "g.h", "spec.nodeName"][..]).prop_map(str::to_owned),
            "[ab,=\\\\! ]{0,3}",
            0..3,
        ),
    ) {
        let text: Vec<String> =
            terms.iter().map(|t| format!("{}{}{}", t.field, t.op, escape_value(&t.value))).collect();
        let text = text.join(",");
        let selector = FieldSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let expected = terms.iter().all(|t| {
            (object.get(&t.field).map_or("", String::as_str) == t.value) != (t.op == "!=")
        });
        prop_assert_eq!(selector.matches(&object), expected, "{:?}", text);
        for name in ["f", "g.h", "spec.nodeName"] {
            let eq: Vec<&str> = terms
                .iter()
                .filter(|t| t.field == name && t.op != "!=")
                .map(|t| t.value.as_str())
                .collect();
            match selector.exact(name) {
                Some(v) => prop_assert!(eq.contains(&v)),
                None => prop_assert!(eq.is_empty()),
            }
        }
        prop_assert_eq!(FieldSelector::parse(&selector.to_string()), Ok(selector));
    }
}

// Selectors of up to 30 terms: more cases, so that the rarer combinations (a denied value
// on one of many absent-ok keys) come up.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn compiled_matching_agrees_with_reference_on_repeated_keys(
        reqs in proptest::collection::vec(repeated_req(), 0..30),
        labels in many_key_labels(),
    ) {
        let text = render(&reqs);
        let selector = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let expected = reference_matches(&reqs, &labels);
        prop_assert_eq!(selector.matches(&labels), expected, "{:?} on {:?}", text, labels);
        prop_assert_eq!(selector.matches(&labels as &dyn LabelSource), expected);
        let slice: Vec<(Box<str>, Box<str>)> =
            labels.iter().map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str()))).collect();
        prop_assert_eq!(selector.matches(slice.as_slice()), expected);
        prop_assert_eq!(sel(&selector.to_string()), selector);
    }
}
