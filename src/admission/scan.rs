//! The admission fast path's reader: a strict JSON scanner over the common shape of a
//! StormService or RoleSet, and the [views](super::view) read with it in one pass.
//!
//! serde's derived readers took ~30k instructions for a review's 1.2 KB (half of what a
//! no-op request costs end to end, TLS included), most of them matching field names and
//! skipping pod templates value by value. This reader matches the few names the rules read
//! and skips everything else a byte at a time.
//!
//! It gives up (`None`) on anything outside the common shape — an escaped string, an
//! exponent, a `null` where no `Option` is read, a repeated field, an analysis, nesting
//! deeper than [`MAX_DEPTH`] — and the caller then reads the document with serde, which
//! decides. So wherever it answers, it answers with exactly the view serde reads (a property
//! test holds it to that), and it never has to name an error.
//!
//! Fenced: [`review`] is the one entry (the webhook's fast path calls it; nothing else reads
//! with the scanner), so the reader's shortcuts cannot leak into a path that must decide.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::IgnoredAny;

use super::hook::Hook;
use super::validation::{OwnedKind, View};
use super::view::{
    CanaryView, Count, MetaView, PauseView, PodSpecView, PodTemplateView, RoleSetSpecView,
    RoleSetView, RoleStrategyView, RoleView, SchedulingView, SelectorView, StepView,
    StormServiceSpecView, StormServiceStrategyView, StormServiceView, TemplateMetaView,
    TemplateView,
};
use crate::api::GROUP;
use crate::api::borrowed::{IntOrStr, Str};
use crate::api::{RoleSetUpdateStrategy, RoleUpdateStrategyType, StormServiceUpdateStrategyType};

/// An ordinary create or update of a webhook's kind, as the scanner read its AdmissionReview.
pub struct Scanned<'a> {
    /// The request's `uid`, which the answer repeats.
    pub uid: &'a str,
    /// The object's kind (the webhook's).
    pub kind: &'a str,
    /// The request's namespace (empty when it has none).
    pub namespace: &'a str,
    /// The request's name (empty for a create with a generated name).
    pub name: &'a str,
    /// The object, as the rules read it.
    pub view: View<'a>,
}

/// The fast path's one entry: an AdmissionReview `body` read as the webhook's serde reading
/// of it would read it; `None` when the scanner gives up, or when the request is not an
/// ordinary create or update of `hook`'s kind, or (validating) when it has a stored object.
pub fn review<'a>(hook: Hook, body: &'a str) -> Option<Scanned<'a>> {
    let s = &mut Scanner::new(body);
    let mut seen = Seen::default();
    let (mut api_version, mut review_kind, mut request) = (None, None, None);
    s.object(|s, key| {
        match key {
            "apiVersion" => (seen.first(0)?, api_version = Some(s.string()?)),
            "kind" => (seen.first(1)?, review_kind = Some(s.string()?)),
            "request" => (
                seen.first(2)?,
                request = s.nullable(|s| scan_request(hook, s))?,
            ),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    s.end()?;
    let ours = review_kind? == "AdmissionReview" && api_version? == "admission.k8s.io/v1";
    if ours { request } else { None }
}

/// The request of [`review`].
fn scan_request<'a>(hook: Hook, s: &mut Scanner<'a>) -> Option<Scanned<'a>> {
    let mut seen = Seen::default();
    let (mut uid, mut kind, mut resource, mut name, mut namespace) = (None, None, None, "", None);
    let (mut operation, mut user_info, mut object, mut stored) = (None, None, None, false);
    s.object(|s, key| {
        match key {
            "uid" => (seen.first(0)?, uid = Some(s.string()?)),
            "kind" => (
                seen.first(1)?,
                kind = Some(scan_kind(s, ["group", "version", "kind"])?),
            ),
            "resource" => (
                seen.first(2)?,
                resource = Some(scan_kind(s, ["group", "version", "resource"])?),
            ),
            "name" => (seen.first(3)?, name = s.string()?),
            "namespace" => (seen.first(4)?, namespace = s.nullable(Scanner::string)?),
            "operation" => (seen.first(5)?, operation = Some(s.string()?)),
            "userInfo" => (seen.first(6)?, user_info = Some(s.skip()?)),
            "object" => (
                seen.first(7)?,
                object = s.nullable(|s| match hook.owned_kind() {
                    OwnedKind::StormService => View::of_stormservice(stormservice(s)?),
                    OwnedKind::RoleSet => View::of_roleset(roleset(s)?),
                    OwnedKind::PodSet => None,
                })?,
            ),
            "oldObject" => (
                seen.first(8)?,
                stored = s.nullable(|s| s.object(|s, _| s.skip()))?.is_some(),
            ),
            "dryRun" => (seen.first(9)?, s.bool().map(drop)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    let [group, _, kind] = kind?;
    resource?;
    user_info?;
    // Validation of an update compares with the stored object, which serde reads.
    let operation = operation?;
    let ordinary = matches!(operation, "CREATE" | "UPDATE") && (hook.is_mutating() || !stored);
    if !ordinary || group != GROUP || kind != hook.kind() {
        return None;
    }
    Some(Scanned {
        uid: uid?,
        kind,
        namespace: namespace.unwrap_or_default(),
        name,
        view: object?,
    })
}

/// A `kind` or `resource` of a request: the three strings `fields`, all required.
fn scan_kind<'a>(s: &mut Scanner<'a>, fields: [&str; 3]) -> Option<[&'a str; 3]> {
    let (mut values, mut seen) = ([None; 3], Seen::default());
    s.object(|s, key| match fields.iter().position(|f| *f == key) {
        Some(i) => {
            seen.first(i as u32)?;
            values[i] = Some(s.string()?);
            Some(())
        }
        None => s.skip(),
    })?;
    let [a, b, c] = values;
    Some([a?, b?, c?])
}

/// Deepest nesting read (serde_json refuses beyond 128; deeper documents are left to it). A
/// review's pod templates nest about 20 deep. Below 64: [`Scanner::skip`] keeps a bit per level.
const MAX_DEPTH: usize = 48;
const _: () = assert!(MAX_DEPTH < 64);

/// A position in a JSON document. Every reader consumes one value, with the whitespace
/// before it, or gives up.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
    /// Where plain strings end: see [`Stops`].
    stops: Stops,
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `text`.
    fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            depth: 0,
            stops: Stops::of(text.as_bytes()),
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after JSON whitespace (which is exactly these four).
    fn peek(&mut self) -> Option<u8> {
        while let Some(&b) = self.bytes().get(self.at) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(b);
            }
            self.at += 1;
        }
        None
    }

    fn eat(&mut self, expected: u8) -> Option<()> {
        (self.peek()? == expected).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.peek()?;
        let rest = self.bytes().get(self.at..)?;
        rest.starts_with(word.as_bytes())
            .then(|| self.at += word.len())
    }

    /// Whether the next value is `null` (consumed if it is).
    fn null(&mut self) -> bool {
        self.literal("null").is_some()
    }

    /// The document ends here (whitespace may follow).
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// A string without escapes or control characters, borrowed from the document.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let end = self.stops.next(start);
        self.at = end;
        self.eat_raw(b'"')?;
        // Both ends are ASCII quotes, so both are character boundaries.
        self.text.get(start..end)
    }

    fn eat_raw(&mut self, expected: u8) -> Option<()> {
        (self.bytes().get(self.at) == Some(&expected)).then(|| self.at += 1)
    }

    /// An integer written without fraction or exponent (one beyond `i64` gives up, and so
    /// does `-0`, which serde reads as a float).
    fn int(&mut self) -> Option<i64> {
        self.peek()?;
        let sign = if self.eat_raw(b'-').is_some() { -1 } else { 1 };
        let start = self.at;
        let mut value = 0i64;
        while let Some(digit) = self.bytes().get(self.at).and_then(|b| b.checked_sub(b'0')) {
            if digit > 9 {
                break;
            }
            value = value
                .checked_mul(10)?
                .checked_add(sign * i64::from(digit))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.bytes()[start] == b'0';
        if digits == 0
            || leading_zero
            || (sign < 0 && value == 0)
            || matches!(self.bytes().get(self.at), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        Some(value)
    }

    fn digits(&mut self) -> usize {
        let count = self.bytes()[self.at..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        self.at += count;
        count
    }

    /// An `int32`.
    fn i32(&mut self) -> Option<i32> {
        i32::try_from(self.int()?).ok()
    }

    /// `true` or `false`.
    fn bool(&mut self) -> Option<bool> {
        if self.literal("true").is_some() {
            Some(true)
        } else {
            self.literal("false").map(|()| false)
        }
    }

    /// Any value, checked as strictly as serde_json checks what it skips. One loop over the
    /// bytes, not a call per value: pod templates are most of what a review skips.
    fn skip(&mut self) -> Option<()> {
        let base = self.depth;
        // Bit d of `objects`: the container at depth d is an object (else an array).
        let mut objects = 0u64;
        loop {
            // A value.
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    self.enter(open)?;
                    let object = open == b'{';
                    objects = objects & !(1 << self.depth) | u64::from(object) << self.depth;
                    let close = if object { b'}' } else { b']' };
                    if self.eat(close).is_none() {
                        if object {
                            self.string()?;
                            self.eat(b':')?;
                        }
                        continue;
                    }
                    self.depth -= 1;
                }
                b'"' => drop(self.string()?),
                b't' => self.literal("true")?,
                b'f' => self.literal("false")?,
                b'n' => self.literal("null")?,
                _ => self.number()?,
            }
            // What follows it: the next element or member, or the ends of containers.
            loop {
                if self.depth == base {
                    return Some(());
                }
                let object = objects & 1 << self.depth != 0;
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        if object {
                            self.string()?;
                            self.eat(b':')?;
                        }
                        break;
                    }
                    b'}' if object => self.at += 1,
                    b']' if !object => self.at += 1,
                    _ => return None,
                }
                self.depth -= 1;
            }
        }
    }

    /// A number: an integer, maybe with a fraction (an exponent gives up).
    fn number(&mut self) -> Option<()> {
        self.peek()?;
        let start = self.at;
        self.eat_raw(b'-');
        let digits = self.digits();
        if digits == 0 || (digits > 1 && self.bytes()[self.at - digits] == b'0') {
            return None;
        }
        if self.eat_raw(b'.').is_some() && self.digits() == 0 {
            return None;
        }
        (self.at > start && !matches!(self.bytes().get(self.at), Some(b'e' | b'E'))).then_some(())
    }

    fn enter(&mut self, open: u8) -> Option<()> {
        self.eat(open)?;
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// An object: `field` reads the value of each key.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.enter(b'{')?;
        if self.eat(b'}').is_none() {
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                field(self, key)?;
                if self.eat(b',').is_none() {
                    self.eat(b'}')?;
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// An array: `element` reads each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.enter(b'[')?;
        if self.eat(b']').is_none() {
            loop {
                element(self)?;
                if self.eat(b',').is_none() {
                    self.eat(b']')?;
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// A `Vec` of what `read` reads from each element.
    fn list<T>(&mut self, mut read: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut list = Vec::new();
        self.array(|s| {
            list.push(read(s)?);
            Some(())
        })?;
        Some(list)
    }

    /// What `read` reads, or `None` for `null` (an `Option` field as serde reads it).
    fn nullable<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.null() {
            Some(None)
        } else {
            read(self).map(Some)
        }
    }

    fn str(&mut self) -> Option<Str<'a>> {
        self.string().map(|s| Str(Cow::Borrowed(s)))
    }

    /// A value that is only tested for presence (`Option<IgnoredAny>`).
    fn present(&mut self) -> Option<Option<IgnoredAny>> {
        self.nullable(|s| s.skip().map(|()| IgnoredAny))
    }
}

/// One bit per byte of a document, set where a plain string ends: at a quote, an escape or a
/// control character. Found for the whole document in one pass, eight bytes at a time, so
/// that finding where a string ends is one look-up (a review's ~100 strings are mostly
/// shorter than a word, and finding each one's end on its own cost more than the pass).
struct Stops(Vec<u64>);

impl Stops {
    fn of(bytes: &[u8]) -> Self {
        const ONES: u64 = u64::MAX / 255;
        const LOWS: u64 = ONES * 0x7f;
        // The top bit of each byte that stops a string. Exact for every byte: each byte's low
        // seven bits are added to on their own, so nothing carries into the next.
        let stops = |word: u64| {
            let low = word & LOWS;
            let not_quote = (low ^ (ONES * u64::from(b'"'))) + LOWS;
            let not_escape = (low ^ (ONES * u64::from(b'\\'))) + LOWS;
            let printable = low + ONES * (0x80 - 0x20);
            !(not_quote & not_escape & printable | word) & !LOWS
        };
        // Gathers the top bit of each byte into eight bits, the first byte's lowest.
        let gather = |tops: u64| (tops >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        let mut bits = Vec::with_capacity(bytes.len() / 64 + 1);
        let mut blocks = bytes.chunks_exact(64);
        for block in &mut blocks {
            let mut block_bits = 0;
            for (i, word) in block.chunks_exact(8).enumerate() {
                let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
                block_bits |= gather(stops(word)) << (8 * i);
            }
            bits.push(block_bits);
        }
        // The rest a byte at a time; from the end on every position stops.
        let rest = blocks.remainder();
        let mut last = u64::MAX << rest.len();
        for (i, &b) in rest.iter().enumerate() {
            if b == b'"' || b == b'\\' || b < 0x20 {
                last |= 1 << i;
            }
        }
        bits.push(last);
        Stops(bits)
    }

    /// The first position from `from` (at most the document's length) that stops a string:
    /// the document's length if none does.
    fn next(&self, from: usize) -> usize {
        let mut word = from / 64;
        let bits = self.word(word) >> (from % 64);
        if bits != 0 {
            return from + bits.trailing_zeros() as usize;
        }
        loop {
            word += 1;
            let bits = self.word(word);
            if bits != 0 {
                return word * 64 + bits.trailing_zeros() as usize;
            }
        }
    }

    /// Past the last word every position stops.
    fn word(&self, i: usize) -> u64 {
        self.0.get(i).copied().unwrap_or(u64::MAX)
    }
}

/// The fields of one object read so far: serde refuses a repeated one, so a reader gives up.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    /// `Some` the first time `field` (below 32) is read.
    fn first(&mut self, field: u32) -> Option<()> {
        let bit = 1 << field;
        (self.0 & bit == 0).then(|| self.0 |= bit)
    }
}

/// A StormService, as `serde_json::from_str::<StormServiceView>` reads it.
fn stormservice<'a>(s: &mut Scanner<'a>) -> Option<StormServiceView<'a>> {
    let (mut metadata, mut spec, mut seen) = (MetaView::default(), None, Seen::default());
    s.object(|s, key| match key {
        "metadata" => {
            seen.first(0)?;
            metadata = meta(s)?;
            Some(())
        }
        "spec" => {
            seen.first(1)?;
            spec = s.nullable(stormservice_spec)?;
            Some(())
        }
        _ => s.skip(),
    })?;
    Some(StormServiceView { metadata, spec })
}

/// A RoleSet, as `serde_json::from_str::<RoleSetView>` reads it.
fn roleset<'a>(s: &mut Scanner<'a>) -> Option<RoleSetView<'a>> {
    let (mut metadata, mut spec, mut seen) = (MetaView::default(), None, Seen::default());
    s.object(|s, key| match key {
        "metadata" => {
            seen.first(0)?;
            metadata = meta(s)?;
            Some(())
        }
        "spec" => {
            seen.first(1)?;
            spec = s.nullable(roleset_spec)?;
            Some(())
        }
        _ => s.skip(),
    })?;
    Some(RoleSetView { metadata, spec })
}

fn meta<'a>(s: &mut Scanner<'a>) -> Option<MetaView<'a>> {
    let (mut meta, mut seen) = (MetaView::default(), Seen::default());
    s.object(|s, key| {
        match key {
            "name" => (seen.first(0)?, meta.name = s.nullable(Scanner::str)?),
            "generateName" => (
                seen.first(1)?,
                meta.generate_name = s.nullable(Scanner::str)?,
            ),
            "deletionTimestamp" => (seen.first(2)?, meta.deletion_timestamp = s.present()?),
            "namespace" => (seen.first(3)?, meta.namespace = s.nullable(Scanner::str)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(meta)
}

fn stormservice_spec<'a>(s: &mut Scanner<'a>) -> Option<StormServiceSpecView<'a>> {
    let mut seen = Seen::default();
    let (mut replicas, mut selector, mut stateful, mut template) = (None, None, None, None);
    let (mut update_strategy, mut revision_history_limit, mut paused) = (None, None, None);
    let (mut disruption_tolerance, mut progress_deadline_seconds) = (None, None);
    let mut min_ready_seconds = None;
    s.object(|s, key| {
        match key {
            "replicas" => (seen.first(0)?, replicas = s.nullable(Scanner::i32)?),
            "selector" => (seen.first(1)?, selector = Some(label_selector(s)?)),
            "stateful" => (seen.first(2)?, stateful = s.nullable(Scanner::bool)?),
            "template" => (seen.first(3)?, template = Some(template_view(s)?)),
            "updateStrategy" => (
                seen.first(4)?,
                update_strategy = s.nullable(stormservice_strategy)?,
            ),
            "revisionHistoryLimit" => (
                seen.first(5)?,
                revision_history_limit = s.nullable(Scanner::i32)?,
            ),
            "paused" => (seen.first(6)?, paused = s.nullable(Scanner::bool)?),
            "disruptionTolerance" => (seen.first(7)?, disruption_tolerance = s.present()?),
            "progressDeadlineSeconds" => (
                seen.first(8)?,
                progress_deadline_seconds = s.nullable(Scanner::i32)?,
            ),
            "minReadySeconds" => (
                seen.first(9)?,
                min_ready_seconds = s.nullable(Scanner::i32)?,
            ),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(StormServiceSpecView {
        replicas,
        // Required fields: without them serde refuses the spec.
        selector: selector?,
        stateful,
        template: template?,
        update_strategy,
        revision_history_limit,
        paused,
        disruption_tolerance,
        progress_deadline_seconds,
        min_ready_seconds,
    })
}

fn label_selector<'a>(s: &mut Scanner<'a>) -> Option<SelectorView<'a>> {
    let (mut selector, mut seen) = (SelectorView::default(), Seen::default());
    s.object(|s, key| {
        match key {
            "matchLabels" => (seen.first(0)?, selector.match_labels = s.nullable(labels)?),
            // Rare; serde reads them.
            "matchExpressions" => return None,
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(selector)
}

/// A map of strings; a repeated key keeps its last value, as serde's `BTreeMap` does.
fn labels<'a>(s: &mut Scanner<'a>) -> Option<BTreeMap<Str<'a>, Str<'a>>> {
    let mut labels = BTreeMap::new();
    s.object(|s, key| {
        labels.insert(Str(Cow::Borrowed(key)), s.str()?);
        Some(())
    })?;
    Some(labels)
}

fn template_view<'a>(s: &mut Scanner<'a>) -> Option<TemplateView<'a>> {
    let (mut metadata, mut spec, mut seen) = (None, None, Seen::default());
    s.object(|s, key| {
        match key {
            "metadata" => (seen.first(0)?, metadata = s.nullable(template_meta)?),
            "spec" => (seen.first(1)?, spec = s.nullable(roleset_spec)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(TemplateView { metadata, spec })
}

fn template_meta<'a>(s: &mut Scanner<'a>) -> Option<TemplateMetaView<'a>> {
    let (mut meta, mut seen) = (TemplateMetaView { labels: None }, Seen::default());
    s.object(|s, key| {
        match key {
            "labels" => (seen.first(0)?, meta.labels = s.nullable(labels)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(meta)
}

fn stormservice_strategy<'a>(s: &mut Scanner<'a>) -> Option<StormServiceStrategyView<'a>> {
    let mut seen = Seen::default();
    let mut strategy = StormServiceStrategyView {
        type_: None,
        max_unavailable: None,
        max_surge: None,
        canary: None,
    };
    s.object(|s, key| {
        match key {
            "type" => (
                seen.first(0)?,
                strategy.type_ = s.nullable(|s| match s.string()? {
                    "RollingUpdate" => Some(StormServiceUpdateStrategyType::RollingUpdate),
                    "InPlaceUpdate" => Some(StormServiceUpdateStrategyType::InPlaceUpdate),
                    _ => None,
                })?,
            ),
            "maxUnavailable" => (
                seen.first(1)?,
                strategy.max_unavailable = s.nullable(int_or_str)?,
            ),
            "maxSurge" => (seen.first(2)?, strategy.max_surge = s.nullable(int_or_str)?),
            "canary" => (seen.first(3)?, strategy.canary = s.nullable(canary)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(strategy)
}

fn int_or_str<'a>(s: &mut Scanner<'a>) -> Option<IntOrStr<'a>> {
    if s.peek()? == b'"' {
        s.str().map(IntOrStr::Str)
    } else {
        s.i32().map(IntOrStr::Int)
    }
}

fn canary<'a>(s: &mut Scanner<'a>) -> Option<CanaryView<'a>> {
    let (mut steps, mut delay, mut seen) = (None, None, Seen::default());
    s.object(|s, key| {
        match key {
            "steps" => (seen.first(0)?, steps = s.nullable(|s| s.list(step))?),
            // Analyses are read by their own types; serde reads them.
            "analysis" => return None,
            "abortScaleDownDelaySeconds" => (seen.first(1)?, delay = s.nullable(Scanner::i32)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(CanaryView {
        steps,
        analysis: None,
        abort_scale_down_delay_seconds: delay,
    })
}

fn step<'a>(s: &mut Scanner<'a>) -> Option<StepView<'a>> {
    let (mut set_weight, mut pause, mut seen) = (None, None, Seen::default());
    s.object(|s, key| {
        match key {
            "setWeight" => (seen.first(0)?, set_weight = s.nullable(Scanner::i32)?),
            "pause" => (seen.first(1)?, pause = s.nullable(pause_view)?),
            "analysis" => return None,
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(StepView {
        set_weight,
        pause,
        analysis: None,
    })
}

fn pause_view<'a>(s: &mut Scanner<'a>) -> Option<PauseView<'a>> {
    let (mut duration, mut seen) = (None, Seen::default());
    s.object(|s, key| {
        match key {
            "duration" => (seen.first(0)?, duration = s.nullable(int_or_str)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(PauseView { duration })
}

fn roleset_spec<'a>(s: &mut Scanner<'a>) -> Option<RoleSetSpecView<'a>> {
    let mut seen = Seen::default();
    let mut spec = RoleSetSpecView {
        roles: None,
        update_strategy: None,
        scheduling_strategy: None,
        topology_policy: None,
        pairing: None,
        min_ready_seconds: None,
        serving_gate: None,
    };
    s.object(|s, key| {
        match key {
            "roles" => (seen.first(0)?, spec.roles = s.nullable(|s| s.list(role))?),
            // Rare (opt-in): serde reads it.
            "pairing" => return None,
            "updateStrategy" => (
                seen.first(1)?,
                spec.update_strategy = s.nullable(|s| match s.string()? {
                    "Parallel" => Some(RoleSetUpdateStrategy::Parallel),
                    "Sequential" => Some(RoleSetUpdateStrategy::Sequential),
                    "Interleave" => Some(RoleSetUpdateStrategy::Interleave),
                    _ => None,
                })?,
            ),
            "schedulingStrategy" => (
                seen.first(2)?,
                spec.scheduling_strategy = s.nullable(scheduling)?,
            ),
            "topologyPolicy" => (seen.first(3)?, spec.topology_policy = s.present()?),
            "minReadySeconds" => (
                seen.first(4)?,
                spec.min_ready_seconds = s.nullable(Scanner::i32)?,
            ),
            "servingGate" => (seen.first(5)?, spec.serving_gate = s.present()?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(spec)
}

fn role<'a>(s: &mut Scanner<'a>) -> Option<RoleView<'a>> {
    let mut seen = Seen::default();
    let mut name = None;
    let mut role = RoleView {
        name: Str::default(),
        replicas: None,
        upgrade_order: None,
        pod_group_size: None,
        update_strategy: None,
        stateful: None,
        template: None,
        disruption_tolerance: None,
        scheduling_strategy: None,
        rollout: None,
        drain: None,
    };
    s.object(|s, key| {
        match key {
            "name" => (seen.first(0)?, name = Some(s.str()?)),
            "replicas" => (seen.first(1)?, role.replicas = s.nullable(Scanner::i32)?),
            "upgradeOrder" => (
                seen.first(2)?,
                role.upgrade_order = s.nullable(Scanner::i32)?,
            ),
            "podGroupSize" => (
                seen.first(3)?,
                role.pod_group_size = s.nullable(Scanner::i32)?,
            ),
            "updateStrategy" => (
                seen.first(4)?,
                role.update_strategy = s.nullable(role_strategy)?,
            ),
            "stateful" => (seen.first(5)?, role.stateful = s.nullable(Scanner::bool)?),
            "template" => (seen.first(6)?, role.template = s.nullable(pod_template)?),
            "disruptionTolerance" => (seen.first(7)?, role.disruption_tolerance = s.present()?),
            "schedulingStrategy" => (
                seen.first(8)?,
                role.scheduling_strategy = s.nullable(scheduling)?,
            ),
            "rollout" => (seen.first(9)?, role.rollout = s.present()?),
            // Rare (opt-in): serde reads it.
            "drain" => return None,
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    // `name` is required.
    role.name = name?;
    Some(role)
}

fn role_strategy<'a>(s: &mut Scanner<'a>) -> Option<RoleStrategyView<'a>> {
    let mut seen = Seen::default();
    let mut strategy = RoleStrategyView {
        type_: None,
        max_unavailable: None,
        max_surge: None,
    };
    s.object(|s, key| {
        match key {
            "type" => (
                seen.first(0)?,
                strategy.type_ = s.nullable(|s| match s.string()? {
                    "Recreate" => Some(RoleUpdateStrategyType::Recreate),
                    "InPlaceIfPossible" => Some(RoleUpdateStrategyType::InPlaceIfPossible),
                    _ => None,
                })?,
            ),
            "maxUnavailable" => (
                seen.first(1)?,
                strategy.max_unavailable = s.nullable(int_or_str)?,
            ),
            "maxSurge" => (seen.first(2)?, strategy.max_surge = s.nullable(int_or_str)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(strategy)
}

fn pod_template(s: &mut Scanner<'_>) -> Option<PodTemplateView> {
    let (mut spec, mut seen) = (None, Seen::default());
    s.object(|s, key| {
        match key {
            "spec" => (seen.first(0)?, spec = s.nullable(pod_spec)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(PodTemplateView { spec })
}

fn pod_spec(s: &mut Scanner<'_>) -> Option<PodSpecView> {
    let (mut containers, mut init_containers, mut seen) = (Count(0), None, Seen::default());
    s.object(|s, key| {
        match key {
            "containers" => (seen.first(0)?, containers = count(s)?),
            "initContainers" => (seen.first(1)?, init_containers = s.nullable(count)?),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(PodSpecView {
        containers,
        init_containers,
    })
}

fn count(s: &mut Scanner<'_>) -> Option<Count> {
    let mut count = 0;
    s.array(|s| {
        count += 1;
        s.skip()
    })?;
    Some(Count(count))
}

fn scheduling(s: &mut Scanner<'_>) -> Option<SchedulingView> {
    let mut seen = Seen::default();
    let mut view = SchedulingView {
        godel_scheduling_strategy: None,
        coscheduling_scheduling_strategy: None,
        volcano_scheduling_strategy: None,
    };
    s.object(|s, key| {
        match key {
            "godelSchedulingStrategy" => (
                seen.first(0)?,
                view.godel_scheduling_strategy = s.present()?,
            ),
            "coschedulingSchedulingStrategy" => (
                seen.first(1)?,
                view.coscheduling_scheduling_strategy = s.present()?,
            ),
            "volcanoSchedulingStrategy" => (
                seen.first(2)?,
                view.volcano_scheduling_strategy = s.present()?,
            ),
            _ => (s.skip()?, ()),
        };
        Some(())
    })?;
    Some(view)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_string_ends_at_the_first_quote_escape_or_control_character(
            // Bytes near the ones that stop a string ('"' ^ 1 is '#', '\\' ^ 1 is ']'), and
            // any other byte.
            bytes in prop::collection::vec(
                prop_oneof![
                    prop::sample::select(vec![b'"', b'#', b'\\', b']', 0, 0x1f, b' ', b'!', 0x7f, 0x80, 0xff]),
                    any::<u8>(),
                ],
                0..200,
            ),
            from in 0usize..200,
        ) {
            let from = from.min(bytes.len());
            let stops = Stops::of(&bytes);
            let expected = bytes[from..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .map_or(bytes.len(), |at| from + at);
            prop_assert_eq!(stops.next(from), expected);
        }
    }
}
