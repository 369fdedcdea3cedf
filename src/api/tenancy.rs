//! Analysis queries scoped to the tenant (docs/rollouts.md#tenancy): an endpoint the admin
//! configured with `tenancy: namespace` (the default) answers a StormService only about its
//! own namespace. Every selector of the query is made to carry `<label>="<namespace>"` —
//! the way prom-label-proxy enforces tenancy in front of Prometheus — and a query that
//! cannot be scoped (it asks for the label itself, or does not parse) is refused: at
//! admission with its field path, and by the controller, which sends it nowhere.

use promql_parser::label::{MatchOp, Matcher, Matchers};
use promql_parser::parser::{self, Expr, VectorSelector};

use super::bounded_status::{MEASUREMENT_MESSAGE_BYTES, bounded_text};

/// The label Prometheus' Kubernetes service discovery gives a pod's namespace, as most
/// scrape configurations relabel it.
pub const DEFAULT_NAMESPACE_LABEL: &str = "namespace";
/// Deepest bracket nesting a scoped query may have. The PromQL parser and the rewrite
/// recurse once per level: bounded, a query cannot overflow the stack of the shared process.
pub const MAX_QUERY_NESTING: usize = 32;
/// Most operators (`+`, `and`, a unary `-`, ...) a scoped query may have: each nests the
/// syntax tree one level deeper, like a bracket. An analysis query has a handful.
pub const MAX_QUERY_OPERATORS: usize = 64;

/// How an endpoint's answers are scoped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tenancy {
    /// Every selector carries `label="<the StormService's namespace>"`.
    Namespace {
        /// The label holding the namespace in the endpoint's series.
        label: String,
    },
    /// Queries run as written, across every namespace the endpoint holds (`tenancy: none`,
    /// which the admin sets explicitly: for one team's cluster, say).
    AsWritten,
}

impl Default for Tenancy {
    fn default() -> Self {
        Self::Namespace {
            label: DEFAULT_NAMESPACE_LABEL.to_string(),
        }
    }
}

/// What admission knows of an endpoint the operator is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredEndpoint {
    /// The name metrics give as `provider.prometheus.endpoint`.
    pub name: String,
    /// How its answers are scoped.
    pub tenancy: Tenancy,
}

impl Tenancy {
    /// `query` as the endpoint runs it for a StormService of `namespace`, or why it cannot
    /// be run (short, and quoting nothing but the query's own matcher).
    pub fn apply(&self, query: &str, namespace: &str) -> Result<String, String> {
        match self {
            Self::AsWritten => Ok(query.to_string()),
            Self::Namespace { label } => scope_to_namespace(query, label, namespace),
        }
    }
}

/// Whether `name` is a Prometheus label name a scrape configuration can give the namespace
/// (`[a-zA-Z_][a-zA-Z0-9_]*`, not reserved with `__`).
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// `query` with every selector carrying `label="namespace"`. A selector that already has
/// exactly that matcher keeps it; one with any other matcher on `label` (another namespace,
/// a regular expression, a negation) is refused, as is a query beyond the nesting bounds or
/// one that does not parse.
pub fn scope_to_namespace(query: &str, label: &str, namespace: &str) -> Result<String, String> {
    within_nesting_bounds(query)?;
    let parsed = std::panic::catch_unwind(|| parser::parse(query))
        .map_err(|_| "the query cannot be parsed as PromQL".to_string())?;
    let mut expr = parsed.map_err(|e| short(format!("the query is not PromQL: {e}")))?;
    scope_expr(&mut expr, label, namespace)?;
    Ok(expr.to_string())
}

/// The error text stored in a measurement: within its status bound.
fn short(text: String) -> String {
    bounded_text(text, MEASUREMENT_MESSAGE_BYTES)
}

/// Refuses a query whose brackets nest deeper than [`MAX_QUERY_NESTING`] or that has more
/// than [`MAX_QUERY_OPERATORS`] operators, before it is parsed. Read like PromQL's lexer:
/// string literals and comments count nothing, and neither do the matchers inside a
/// selector's braces (they do not nest).
fn within_nesting_bounds(query: &str) -> Result<(), String> {
    let mut depth = 0usize;
    let mut in_braces = false;
    let mut operators = 0usize;
    let mut chars = query.chars().peekable();
    let mut word = String::new();
    let count_word = |word: &mut String, operators: &mut usize| {
        if matches!(word.as_str(), "and" | "or" | "unless" | "atan2") {
            *operators += 1;
        }
        word.clear();
    };
    while let Some(c) = chars.next() {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            if !in_braces {
                word.push(c);
            }
            continue;
        }
        count_word(&mut word, &mut operators);
        match c {
            '"' | '\'' | '`' => {
                while let Some(s) = chars.next() {
                    if s == c {
                        break;
                    }
                    if s == '\\' && c != '`' {
                        chars.next();
                    }
                }
            }
            '#' => {
                for s in chars.by_ref() {
                    if s == '\n' {
                        break;
                    }
                }
            }
            '{' => in_braces = true,
            '}' => in_braces = false,
            '(' | '[' => {
                depth += 1;
                if depth > MAX_QUERY_NESTING {
                    return Err(format!(
                        "the query nests brackets deeper than {MAX_QUERY_NESTING}"
                    ));
                }
            }
            ')' | ']' => depth = depth.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '^' | '=' | '!' | '<' | '>' if !in_braces => {
                // A run such as `>=` or `!=` is one operator.
                while chars
                    .peek()
                    .is_some_and(|n| matches!(n, '=' | '~' | '<' | '>'))
                {
                    chars.next();
                }
                operators += 1;
            }
            _ => {}
        }
        if operators > MAX_QUERY_OPERATORS {
            return Err(format!(
                "the query has more than {MAX_QUERY_OPERATORS} operators"
            ));
        }
    }
    count_word(&mut word, &mut operators);
    if operators > MAX_QUERY_OPERATORS {
        return Err(format!(
            "the query has more than {MAX_QUERY_OPERATORS} operators"
        ));
    }
    Ok(())
}

/// Scopes every selector under `expr` (depth bounded by [`within_nesting_bounds`]).
fn scope_expr(expr: &mut Expr, label: &str, namespace: &str) -> Result<(), String> {
    match expr {
        Expr::VectorSelector(selector) => scope_selector(selector, label, namespace),
        Expr::MatrixSelector(matrix) => scope_selector(&mut matrix.vs, label, namespace),
        Expr::Aggregate(aggregate) => {
            scope_expr(&mut aggregate.expr, label, namespace)?;
            match &mut aggregate.param {
                Some(param) => scope_expr(param, label, namespace),
                None => Ok(()),
            }
        }
        Expr::Unary(unary) => scope_expr(&mut unary.expr, label, namespace),
        Expr::Binary(binary) => {
            scope_expr(&mut binary.lhs, label, namespace)?;
            scope_expr(&mut binary.rhs, label, namespace)
        }
        Expr::Paren(paren) => scope_expr(&mut paren.expr, label, namespace),
        Expr::Subquery(subquery) => scope_expr(&mut subquery.expr, label, namespace),
        Expr::Call(call) => call
            .args
            .args
            .iter_mut()
            .try_for_each(|arg| scope_expr(arg, label, namespace)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        // Never made by the parser; nothing unknown is let through.
        Expr::Extension(_) => Err("the query cannot be scoped to the namespace".into()),
    }
}

/// Adds `label="namespace"` to the selector — to each alternative of an `or` of matcher
/// sets, since each selects on its own.
fn scope_selector(
    selector: &mut VectorSelector,
    label: &str,
    namespace: &str,
) -> Result<(), String> {
    let Matchers {
        matchers,
        or_matchers,
    } = &mut selector.matchers;
    if or_matchers.is_empty() {
        scope_matchers(matchers, label, namespace)
    } else {
        // The parser keeps the plain list empty once there are alternatives; a matcher left
        // there would not be printed, so it is refused rather than dropped.
        if !matchers.is_empty() {
            return Err("the query cannot be scoped to the namespace".into());
        }
        or_matchers
            .iter_mut()
            .try_for_each(|group| scope_matchers(group, label, namespace))
    }
}

fn scope_matchers(matchers: &mut Vec<Matcher>, label: &str, namespace: &str) -> Result<(), String> {
    let mut scoped = false;
    for matcher in matchers.iter().filter(|m| m.name == label) {
        if matcher.op == MatchOp::Equal && matcher.value == namespace {
            scoped = true;
        } else {
            return Err(short(format!(
                "the query selects on `{label}` itself ({matcher}): the endpoint adds the \
                 StormService's namespace to every selector"
            )));
        }
    }
    if !scoped {
        matchers.push(Matcher::new(MatchOp::Equal, label, namespace));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped(query: &str) -> Result<String, String> {
        scope_to_namespace(query, "namespace", "team-a")
    }

    #[test]
    fn every_selector_carries_the_namespace() {
        assert_eq!(scoped("sum(up)").unwrap(), r#"sum(up{namespace="team-a"})"#);
        assert_eq!(
            scoped(r#"sum(rate(errors{code=~"5.."}[5m])) / sum(rate(requests[5m] offset 1m))"#)
                .unwrap(),
            r#"sum(rate(errors{code=~"5..",namespace="team-a"}[5m])) / sum(rate(requests{namespace="team-a"}[5m] offset 1m))"#
        );
        assert_eq!(
            scoped("max_over_time(rate(x[1m])[10m:30s])").unwrap(),
            r#"max_over_time(rate(x{namespace="team-a"}[1m])[10m:30s])"#
        );
        assert_eq!(
            scoped(r#"{job="a" or job="b"}"#).unwrap(),
            r#"{job="a", namespace="team-a" or job="b", namespace="team-a"}"#
        );
        assert_eq!(
            scoped(r#"quantile(0.9, x) + on(a) group_left topk(1, y) and vector(1)"#).unwrap(),
            r#"quantile(0.9, x{namespace="team-a"}) + on (a) group_left () topk(1, y{namespace="team-a"}) and vector(1)"#
        );
        assert_eq!(scoped("time() - 1").unwrap(), "time() - 1");
    }

    #[test]
    fn the_own_namespace_may_be_named_and_no_other() {
        assert_eq!(
            scoped(r#"sum(up{namespace="team-a"})"#).unwrap(),
            r#"sum(up{namespace="team-a"})"#
        );
        for query in [
            r#"sum(up{namespace="team-b"})"#,
            r#"sum(up{namespace=~"team-.*"})"#,
            r#"sum(up{namespace!="team-a"})"#,
            r#"up{namespace="team-a"} or up{namespace=""}"#,
            r#"{job="a" or namespace="team-b"}"#,
        ] {
            let why = scoped(query).unwrap_err();
            assert!(
                why.contains("selects on `namespace` itself"),
                "{query}: {why}"
            );
        }
        // Another label name is the admin's to choose.
        assert_eq!(
            scope_to_namespace(r#"up{namespace="x"}"#, "k8s_namespace", "team-a").unwrap(),
            r#"up{k8s_namespace="team-a",namespace="x"}"#
        );
    }

    #[test]
    fn what_cannot_be_parsed_or_nests_too_deep_is_refused_before_the_parser_recurses() {
        assert!(scoped("sum(").unwrap_err().contains("not PromQL"));
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(scoped(&deep).unwrap_err().contains("deeper than 32"));
        let chain = format!("a{}", " + a".repeat(5_000));
        assert!(
            scoped(&chain)
                .unwrap_err()
                .contains("more than 64 operators")
        );
        let unary = format!("{}1", "-".repeat(5_000));
        assert!(
            scoped(&unary)
                .unwrap_err()
                .contains("more than 64 operators")
        );
        let words = format!("a{}", " or a".repeat(5_000));
        assert!(
            scoped(&words)
                .unwrap_err()
                .contains("more than 64 operators")
        );
        // Brackets and operators inside strings, comments and matchers count nothing.
        let text = "(((((((((((((((((((((((((((((((((((((((+-+-+-+-+-+-+-+-+";
        let quoted = format!(
            "label_replace(up{{a=\"{text}\",b!='x{text}y' or a='{text}',c!=\"1\",d=\"2\"}}, \"x\", `{text}`, \"y\", \"z\") # {text}\n"
        );
        assert!(scoped(&quoted).is_ok(), "{:?}", scoped(&quoted));
        let errors: Vec<String> = [deep, chain, "sum(".repeat(2000)]
            .iter()
            .map(|q| scoped(q).unwrap_err())
            .collect();
        for why in errors {
            assert!(why.len() <= MEASUREMENT_MESSAGE_BYTES as usize, "{why}");
        }
    }

    #[test]
    fn tenancy_as_written_changes_nothing() {
        assert_eq!(
            Tenancy::AsWritten
                .apply(r#"sum(up{namespace="b"})"#, "a")
                .unwrap(),
            r#"sum(up{namespace="b"})"#
        );
        assert_eq!(
            Tenancy::default().apply("up", "a").unwrap(),
            r#"up{namespace="a"}"#
        );
        assert!(is_label_name("namespace") && is_label_name("kube_ns_1"));
        assert!(!is_label_name("") && !is_label_name("__name__") && !is_label_name("1a"));
        assert!(!is_label_name("a.b"));
    }

    /// Every selector of a parsed query, with the matcher sets it selects by.
    fn selectors(expr: &Expr, out: &mut Vec<Vec<Vec<Matcher>>>) {
        match expr {
            Expr::VectorSelector(s) => out.push(groups(s)),
            Expr::MatrixSelector(m) => out.push(groups(&m.vs)),
            Expr::Aggregate(a) => {
                selectors(&a.expr, out);
                if let Some(p) = &a.param {
                    selectors(p, out);
                }
            }
            Expr::Unary(u) => selectors(&u.expr, out),
            Expr::Binary(b) => {
                selectors(&b.lhs, out);
                selectors(&b.rhs, out);
            }
            Expr::Paren(p) => selectors(&p.expr, out),
            Expr::Subquery(s) => selectors(&s.expr, out),
            Expr::Call(c) => c.args.args.iter().for_each(|a| selectors(a, out)),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        }
    }

    fn groups(s: &VectorSelector) -> Vec<Vec<Matcher>> {
        if s.matchers.or_matchers.is_empty() {
            vec![s.matchers.matchers.clone()]
        } else {
            s.matchers.or_matchers.clone()
        }
    }

    /// Generated PromQL: selectors with and without matchers (some on the namespace label),
    /// matrix selectors, subqueries, calls, aggregations, binary and unary operators.
    fn query() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let value = prop_oneof![
            Just("team-a".to_string()),
            Just("team-b".to_string()),
            "[a-z0-9\"\\\\ (){}#-]{0,8}"
        ];
        let matcher = (
            prop_oneof![Just("namespace"), Just("job"), Just("code")],
            prop_oneof![Just("="), Just("!="), Just("=~"), Just("!~")],
            value,
        )
            .prop_map(|(name, op, value)| {
                let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
                format!("{name}{op}\"{escaped}\"")
            });
        let matchers = proptest::collection::vec(matcher, 0..3);
        let selector = (
            prop_oneof![Just("up"), Just("http_requests_total"), Just("")],
            matchers,
            any::<bool>(),
        )
            .prop_map(|(name, matchers, or)| {
                let joined = matchers.join(if or { " or " } else { "," });
                match (name, joined.is_empty()) {
                    ("", true) => r#"{job="x"}"#.to_string(),
                    (name, true) => name.to_string(),
                    (name, false) => format!("{name}{{{joined}}}"),
                }
            });
        let leaf = prop_oneof![
            selector.clone(),
            selector.prop_map(|s| format!("rate({s}[5m])")),
        ];
        leaf.prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|s| format!("sum by (job) ({s})")),
                inner
                    .clone()
                    .prop_map(|s| format!("max_over_time(({s})[10m:1m])")),
                inner.clone().prop_map(|s| format!("-({s})")),
                (
                    inner.clone(),
                    inner.clone(),
                    prop_oneof![Just("+"), Just(" and "), Just(" / on(job) ")]
                )
                    .prop_map(|(a, b, op)| format!("({a}){op}({b})")),
                (inner.clone(), 1u8..5).prop_map(|(s, k)| format!("topk({k}, {s})")),
                inner.prop_map(|s| format!("{s} > bool 0.5")),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the query: the scoped query parses, and every selector of it — every
        /// alternative of every selector — carries exactly `namespace="team-a"` on the
        /// namespace label; or the query is refused, and then it selected on that label
        /// itself or did not parse.
        #[test]
        fn a_scoped_query_parses_and_every_selector_carries_the_namespace(q in query()) {
            match scoped(&q) {
                Ok(out) => {
                    let parsed = parser::parse(&out).map_err(|e| {
                        proptest::test_runner::TestCaseError::fail(format!("{out}: {e}"))
                    })?;
                    let mut all = Vec::new();
                    selectors(&parsed, &mut all);
                    for group in all.iter().flatten() {
                        let on_label: Vec<&Matcher> =
                            group.iter().filter(|m| m.name == "namespace").collect();
                        proptest::prop_assert!(
                            !on_label.is_empty()
                                && on_label.iter().all(|m| m.op == MatchOp::Equal && m.value == "team-a"),
                            "{} -> {}", q, out
                        );
                    }
                }
                Err(why) => proptest::prop_assert!(
                    why.contains("itself") || why.contains("not PromQL"),
                    "{}: {}", q, why
                ),
            }
        }

        /// No input panics the scoping or stays unbounded in its error.
        #[test]
        fn any_text_is_scoped_or_refused_shortly(q in "[a-z(){}\\[\\]\"'`#=~!<>+*/^%-, 0-9:@.]{0,200}") {
            if let Err(why) = scoped(&q) {
                proptest::prop_assert!(why.len() <= MEASUREMENT_MESSAGE_BYTES as usize);
            }
        }
    }
}
