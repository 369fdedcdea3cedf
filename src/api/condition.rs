//! Analysis conditions: the small expression language of a metric's `successCondition` and
//! `failureCondition` (docs/rollouts.md#canary-analysis), judged against one measured number,
//! `result`.
//!
//! ```text
//! or   := and ('||' and)*            and := not ('&&' not)*
//! not  := '!' not | cmp              cmp := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?
//! sum  := prod (('+' | '-') prod)*   prod := unary (('*' | '/') unary)*
//! unary := '-' unary | atom
//! atom := number | 'result' | 'result[0]' | 'true' | 'false'
//!       | ('isNaN' | 'isInf') '(' sum ')' | '(' or ')'
//! ```
//!
//! Typed when parsed (a condition is a truth value; `&&` joins truth values, `<` numbers), so
//! a condition that parses always evaluates. `result[0]` is Argo Rollouts' spelling of the one
//! number a query gives. Our own parser rather than a general expression crate: conditions
//! come from tenants and are evaluated in the operator, so the language stays this small,
//! bounded in length ([`MAX_CONDITION_BYTES`]) and nesting ([`MAX_NESTING`]), and fuzzed
//! (`make fuzz`).

use std::fmt;

/// Longest condition: `result >= 0.95 && result < 2` is 29 bytes.
pub const MAX_CONDITION_BYTES: usize = 256;
/// Deepest nesting of parentheses, `!` and unary `-`: keeps the parser's recursion (and the
/// evaluator's) bounded whatever a tenant writes.
pub const MAX_NESTING: usize = 16;

/// A parsed condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition(Truth);

/// Why a condition does not parse: the byte offset and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at offset {at}: {message}")]
pub struct ConditionError {
    /// Byte offset in the condition.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compare {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Clone, Debug, PartialEq)]
enum Number {
    Literal(f64),
    Result,
    Negate(Box<Number>),
    Arith(Arith, Box<Number>, Box<Number>),
}

#[derive(Clone, Debug, PartialEq)]
enum Truth {
    Literal(bool),
    Compare(Compare, Number, Number),
    Not(Box<Truth>),
    And(Box<Truth>, Box<Truth>),
    Or(Box<Truth>, Box<Truth>),
    IsNaN(Number),
    IsInf(Number),
}

/// A term of either type, while parsing.
enum Term {
    Number(Number),
    Truth(Truth),
}

impl Condition {
    /// Parses a condition; the error names the offset and what was expected there.
    pub fn parse(text: &str) -> Result<Self, ConditionError> {
        if text.len() > MAX_CONDITION_BYTES {
            return Err(ConditionError {
                at: MAX_CONDITION_BYTES,
                message: format!("a condition is at most {MAX_CONDITION_BYTES} bytes"),
            });
        }
        let mut parser = Parser {
            text,
            at: 0,
            depth: 0,
        };
        let start = parser.peek_offset();
        let term = parser.or()?;
        parser.skip_space();
        if parser.at < text.len() {
            return Err(parser.error("expected an operator or the end of the condition"));
        }
        match term {
            Term::Truth(t) => Ok(Condition(t)),
            Term::Number(_) => Err(ConditionError {
                at: start,
                message: "a condition must be true or false, e.g. `result < 0.05`, not a number"
                    .into(),
            }),
        }
    }

    /// Whether the condition holds for `result`.
    pub fn holds(&self, result: f64) -> bool {
        self.0.eval(result)
    }
}

impl Number {
    fn eval(&self, result: f64) -> f64 {
        match self {
            Number::Literal(n) => *n,
            Number::Result => result,
            Number::Negate(n) => -n.eval(result),
            Number::Arith(op, a, b) => {
                let (a, b) = (a.eval(result), b.eval(result));
                match op {
                    Arith::Add => a + b,
                    Arith::Sub => a - b,
                    Arith::Mul => a * b,
                    Arith::Div => a / b,
                }
            }
        }
    }
}

impl Truth {
    fn eval(&self, result: f64) -> bool {
        match self {
            Truth::Literal(b) => *b,
            Truth::Compare(op, a, b) => {
                let (a, b) = (a.eval(result), b.eval(result));
                match op {
                    Compare::Lt => a < b,
                    Compare::Le => a <= b,
                    Compare::Gt => a > b,
                    Compare::Ge => a >= b,
                    Compare::Eq => a == b,
                    Compare::Ne => a != b,
                }
            }
            Truth::Not(t) => !t.eval(result),
            Truth::And(a, b) => a.eval(result) && b.eval(result),
            Truth::Or(a, b) => a.eval(result) || b.eval(result),
            Truth::IsNaN(n) => n.eval(result).is_nan(),
            Truth::IsInf(n) => n.eval(result).is_infinite(),
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> ConditionError {
        ConditionError {
            at: self.at,
            message: message.into(),
        }
    }

    fn skip_space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn peek_offset(&mut self) -> usize {
        self.skip_space();
        self.at
    }

    /// Consumes `token` when the input continues with it.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.text[self.at..].starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    /// Enters one level of nesting, refusing past [`MAX_NESTING`].
    fn nest(&mut self) -> Result<(), ConditionError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error(&format!("nested more than {MAX_NESTING} deep")));
        }
        Ok(())
    }

    fn truth(&self, term: Term, at: usize, operator: &str) -> Result<Truth, ConditionError> {
        match term {
            Term::Truth(t) => Ok(t),
            Term::Number(_) => Err(ConditionError {
                at,
                message: format!("`{operator}` needs true or false here, not a number"),
            }),
        }
    }

    fn number(&self, term: Term, at: usize, operator: &str) -> Result<Number, ConditionError> {
        match term {
            Term::Number(n) => Ok(n),
            Term::Truth(_) => Err(ConditionError {
                at,
                message: format!("`{operator}` needs a number here, not true or false"),
            }),
        }
    }

    fn or(&mut self) -> Result<Term, ConditionError> {
        let at = self.peek_offset();
        let mut left = self.and()?;
        while self.eat("||") {
            let right_at = self.peek_offset();
            let right = self.and()?;
            left = Term::Truth(Truth::Or(
                Box::new(self.truth(left, at, "||")?),
                Box::new(self.truth(right, right_at, "||")?),
            ));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Term, ConditionError> {
        let at = self.peek_offset();
        let mut left = self.not()?;
        while self.eat("&&") {
            let right_at = self.peek_offset();
            let right = self.not()?;
            left = Term::Truth(Truth::And(
                Box::new(self.truth(left, at, "&&")?),
                Box::new(self.truth(right, right_at, "&&")?),
            ));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Term, ConditionError> {
        self.skip_space();
        if self.text[self.at..].starts_with('!') && !self.text[self.at..].starts_with("!=") {
            self.at += 1;
            self.nest()?;
            let at = self.peek_offset();
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Term::Truth(Truth::Not(Box::new(
                self.truth(inner, at, "!")?,
            ))));
        }
        self.compare()
    }

    fn compare(&mut self) -> Result<Term, ConditionError> {
        let at = self.peek_offset();
        let left = self.sum()?;
        // Two-byte operators first, so `<=` is not read as `<`.
        for (token, op) in [
            ("<=", Compare::Le),
            (">=", Compare::Ge),
            ("==", Compare::Eq),
            ("!=", Compare::Ne),
            ("<", Compare::Lt),
            (">", Compare::Gt),
        ] {
            if self.eat(token) {
                let right_at = self.peek_offset();
                let right = self.sum()?;
                return Ok(Term::Truth(Truth::Compare(
                    op,
                    self.number(left, at, token)?,
                    self.number(right, right_at, token)?,
                )));
            }
        }
        Ok(left)
    }

    fn sum(&mut self) -> Result<Term, ConditionError> {
        let at = self.peek_offset();
        let mut left = self.product()?;
        loop {
            let (token, op) = if self.eat("+") {
                ("+", Arith::Add)
            } else if self.eat("-") {
                ("-", Arith::Sub)
            } else {
                return Ok(left);
            };
            let right_at = self.peek_offset();
            let right = self.product()?;
            left = Term::Number(Number::Arith(
                op,
                Box::new(self.number(left, at, token)?),
                Box::new(self.number(right, right_at, token)?),
            ));
        }
    }

    fn product(&mut self) -> Result<Term, ConditionError> {
        let at = self.peek_offset();
        let mut left = self.unary()?;
        loop {
            let (token, op) = if self.eat("*") {
                ("*", Arith::Mul)
            } else if self.eat("/") {
                ("/", Arith::Div)
            } else {
                return Ok(left);
            };
            let right_at = self.peek_offset();
            let right = self.unary()?;
            left = Term::Number(Number::Arith(
                op,
                Box::new(self.number(left, at, token)?),
                Box::new(self.number(right, right_at, token)?),
            ));
        }
    }

    fn unary(&mut self) -> Result<Term, ConditionError> {
        if self.eat("-") {
            self.nest()?;
            let at = self.peek_offset();
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Term::Number(Number::Negate(Box::new(
                self.number(inner, at, "-")?,
            ))));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Term, ConditionError> {
        self.skip_space();
        let rest = &self.text[self.at..];
        if self.eat("(") {
            self.nest()?;
            let inner = self.or()?;
            self.depth -= 1;
            if !self.eat(")") {
                return Err(self.error("expected `)`"));
            }
            return Ok(inner);
        }
        let word_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let word = &rest[..word_len];
        if word.is_empty() {
            return Err(self.error(if rest.is_empty() {
                "the condition ends where a value is expected"
            } else {
                "expected a number, `result`, `true`, `false`, `isNaN(…)`, `isInf(…)` or `(`"
            }));
        }
        if word.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            // An exponent may carry a sign: `1e-3`.
            let mut word_len = word_len;
            let bytes = rest.as_bytes();
            if word.ends_with(['e', 'E'])
                && matches!(bytes.get(word_len), Some(b'+' | b'-'))
                && bytes.get(word_len + 1).is_some_and(u8::is_ascii_digit)
            {
                word_len += 1 + rest[word_len + 1..]
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len() - word_len - 1);
            }
            let word = &rest[..word_len];
            return match word.parse::<f64>() {
                Ok(n) if n.is_finite() => {
                    self.at += word_len;
                    Ok(Term::Number(Number::Literal(n)))
                }
                _ => Err(self.error(&format!("`{word}` is not a number"))),
            };
        }
        let start = self.at;
        self.at += word_len;
        match word {
            "result" => {
                if self.eat("[") && !(self.eat("0") && self.eat("]")) {
                    return Err(
                        self.error("only `result[0]` is indexable: a query gives one number")
                    );
                }
                Ok(Term::Number(Number::Result))
            }
            "true" => Ok(Term::Truth(Truth::Literal(true))),
            "false" => Ok(Term::Truth(Truth::Literal(false))),
            "isNaN" | "isInf" => {
                if !self.eat("(") {
                    return Err(self.error(&format!("expected `(` after `{word}`")));
                }
                self.nest()?;
                let at = self.peek_offset();
                let inner = self.sum()?;
                self.depth -= 1;
                if !self.eat(")") {
                    return Err(self.error("expected `)`"));
                }
                let n = self.number(inner, at, word)?;
                Ok(Term::Truth(if word == "isNaN" {
                    Truth::IsNaN(n)
                } else {
                    Truth::IsInf(n)
                }))
            }
            _ => Err(ConditionError {
                at: start,
                message: format!(
                    "unknown name `{word}`: a condition knows `result`, `true`, `false`, `isNaN` and `isInf`"
                ),
            }),
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Literal(n) => write!(f, "{n}"),
            Number::Result => f.write_str("result"),
            Number::Negate(n) => write!(f, "-({n})"),
            Number::Arith(op, a, b) => {
                let op = match op {
                    Arith::Add => "+",
                    Arith::Sub => "-",
                    Arith::Mul => "*",
                    Arith::Div => "/",
                };
                write!(f, "({a} {op} {b})")
            }
        }
    }
}

impl fmt::Display for Truth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Truth::Literal(b) => write!(f, "{b}"),
            Truth::Compare(op, a, b) => {
                let op = match op {
                    Compare::Lt => "<",
                    Compare::Le => "<=",
                    Compare::Gt => ">",
                    Compare::Ge => ">=",
                    Compare::Eq => "==",
                    Compare::Ne => "!=",
                };
                write!(f, "({a} {op} {b})")
            }
            Truth::Not(t) => write!(f, "!({t})"),
            Truth::And(a, b) => write!(f, "({a} && {b})"),
            Truth::Or(a, b) => write!(f, "({a} || {b})"),
            Truth::IsNaN(n) => write!(f, "isNaN({n})"),
            Truth::IsInf(n) => write!(f, "isInf({n})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn holds(condition: &str, result: f64) -> bool {
        Condition::parse(condition)
            .unwrap_or_else(|e| panic!("{condition:?}: {e}"))
            .holds(result)
    }

    #[test]
    fn conditions_judge_the_result() {
        assert!(holds("result < 0.05", 0.01));
        assert!(!holds("result < 0.05", 0.05));
        assert!(holds("result[0] >= 0.95", 0.99));
        assert!(holds("result >= 0.95 && result < 2", 1.0));
        assert!(!holds("result >= 0.95 && result < 2", 2.0));
        assert!(holds("result < 1 || result > 10", 11.0));
        assert!(holds("!(result > 1)", 0.5));
        assert!(holds("result * 1000 <= 250", 0.2));
        assert!(holds("result / 2 + 1 == 2", 2.0));
        assert!(holds("-result > -1", 0.5));
        assert!(holds("1 - 2 - 3 == -4", 0.0), "left-associative");
        assert!(holds("2 + 3 * 4 == 14", 0.0), "* binds tighter than +");
        assert!(
            holds("true || false && false", 0.0),
            "&& binds tighter than ||"
        );
        assert!(holds("isNaN(result)", f64::NAN));
        assert!(!holds("result < 1", f64::NAN), "NaN compares false");
        assert!(holds("isInf(result)", f64::INFINITY));
        assert!(holds("result != 3", 2.0));
        assert!(holds("  result   >=1e-3 ", 0.5));
        assert!(holds("result < 2.5E+1", 20.0));
    }

    #[test]
    fn errors_name_the_offset_and_the_problem() {
        let error = |c: &str| Condition::parse(c).unwrap_err();
        assert_eq!(error("result").at, 0);
        assert!(error("result").message.contains("true or false"));
        assert_eq!(error("result <").at, 8);
        assert!(error("result < ").message.contains("ends where a value"));
        assert_eq!(error("result < 0.05 &&").at, 16);
        assert_eq!(error("result << 1").at, 8);
        assert_eq!(
            error("latency < 1").message.split('`').nth(1),
            Some("latency")
        );
        assert_eq!(error("(result < 1").message, "expected `)`");
        assert!(error("result[1] < 2").message.contains("result[0]"));
        assert!(
            error("1 && result < 2")
                .message
                .contains("`&&` needs true or false")
        );
        assert!(
            error("(result < 1) + 2 > 0")
                .message
                .contains("`+` needs a number")
        );
        assert!(
            error("result < 1 2")
                .message
                .contains("expected an operator")
        );
        assert!(error("1.2.3 < result").message.contains("not a number"));
        assert!(error("1e999 < result").message.contains("not a number"));
        assert!(
            error(&"(".repeat(MAX_NESTING + 1))
                .message
                .contains("nested")
        );
        assert!(error(&"!".repeat(40)).message.contains("nested"));
        assert!(
            error(&format!("result < {}", "1".repeat(MAX_CONDITION_BYTES)))
                .message
                .contains("at most")
        );
    }

    /// A generated condition: its text and how it judges a result.
    fn condition() -> impl Strategy<Value = (String, fn(f64) -> bool)> {
        prop_oneof![
            Just(("result < 0.5".to_string(), (|r| r < 0.5) as fn(f64) -> bool)),
            Just((
                "result >= 0.25".to_string(),
                (|r| r >= 0.25) as fn(f64) -> bool
            )),
            Just((
                "result * 2 > 1".to_string(),
                (|r| r * 2.0 > 1.0) as fn(f64) -> bool
            )),
        ]
    }

    proptest! {
        /// `&&`, `||` and `!` combine conditions as Rust's operators do, with or without
        /// parentheses as their precedence requires.
        #[test]
        fn combinations_judge_as_their_parts((a, fa) in condition(), (b, fb) in condition(),
                                             result in -2.0f64..2.0) {
            prop_assert_eq!(holds(&format!("{a} && {b}"), result), fa(result) && fb(result));
            prop_assert_eq!(holds(&format!("{a} || {b}"), result), fa(result) || fb(result));
            prop_assert_eq!(holds(&format!("!({a}) && {b}"), result), !fa(result) && fb(result));
        }

        /// Whatever the text, parsing answers (never panics) and a parsed condition
        /// evaluates; what it prints parses again to the same condition.
        #[test]
        fn any_text_parses_or_is_refused(text in "[ a-z0-9.!&|<>=()+*/\\[\\]-]{0,40}") {
            if let Ok(c) = Condition::parse(&text) {
                let _ = c.holds(0.5);
                // The printed form parenthesizes every operation, so it may nest deeper or
                // run longer than the text it came from.
                let printed = c.to_string();
                match Condition::parse(&printed) {
                    Ok(again) => prop_assert_eq!(again, c, "{}", printed),
                    Err(e) => prop_assert!(
                        e.message.contains("nested") || e.message.contains("at most"),
                        "{printed}: {e}"
                    ),
                }
            }
        }
    }
}
