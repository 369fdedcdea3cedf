//! JSON kept compressed against a sibling's. The pods of one role and revision have nearly
//! the same spec (they differ in a service-account volume's name, a node, an index), so a
//! pod's spec compressed with the first such pod's spec as the dictionary takes a few dozen
//! bytes instead of a kilobyte and a half; the dictionary is held once for all of them.
//! Decisions read a pod's spec rarely (an in-place update, an adoption, a topology check),
//! and unpack it then.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// A JSON value's text, plain as decoded, or packed by [`Dictionaries::pack`].
#[derive(Clone, Debug)]
pub struct PackedJson(Packing);

#[derive(Clone, Debug)]
enum Packing {
    Plain(Box<RawValue>),
    Packed {
        /// The sibling's text the bytes refer to.
        dictionary: Arc<str>,
        /// The LZ4 block.
        bytes: Box<[u8]>,
        /// The text's length, which unpacking needs.
        len: u32,
    },
}

impl PackedJson {
    /// The JSON text, unpacked when it is packed. `None` only if packed bytes fail to unpack,
    /// which they cannot: they are this process's own packing of the text, with the very
    /// dictionary they hold.
    pub fn text(&self) -> Option<Cow<'_, str>> {
        match &self.0 {
            Packing::Plain(raw) => Some(Cow::Borrowed(raw.get())),
            Packing::Packed {
                dictionary,
                bytes,
                len,
            } => {
                let text = lz4_flex::block::decompress_with_dict(
                    bytes,
                    *len as usize,
                    dictionary.as_bytes(),
                )
                .ok()?;
                String::from_utf8(text).ok().map(Cow::Owned)
            }
        }
    }

    /// Whether this copy is packed (against a dictionary).
    pub fn is_packed(&self) -> bool {
        matches!(self.0, Packing::Packed { .. })
    }

    /// Whether both are packed against one dictionary.
    #[cfg(test)]
    pub(crate) fn same_dictionary(a: &Self, b: &Self) -> bool {
        match (&a.0, &b.0) {
            (Packing::Packed { dictionary: a, .. }, Packing::Packed { dictionary: b, .. }) => {
                Arc::ptr_eq(a, b)
            }
            _ => false,
        }
    }

    /// Bytes this copy holds of its own (the dictionary is shared).
    pub fn own_bytes(&self) -> usize {
        match &self.0 {
            Packing::Plain(raw) => raw.get().len(),
            Packing::Packed { bytes, .. } => bytes.len(),
        }
    }
}

impl From<Box<RawValue>> for PackedJson {
    fn from(raw: Box<RawValue>) -> Self {
        Self(Packing::Plain(raw))
    }
}

impl Serialize for PackedJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self
            .text()
            .ok_or_else(|| serde::ser::Error::custom("packed JSON that does not unpack"))?;
        let raw = RawValue::from_string(text.into_owned()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PackedJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self::from)
    }
}

/// The dictionaries texts are packed against, one per key (a namespace and a role's
/// template hash: siblings, and never another namespace's text). Each lives while a packed
/// text refers to it; entries of dead ones are swept whenever the table doubles.
#[derive(Default)]
pub struct Dictionaries {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_key: HashMap<String, Weak<str>>,
    sweep_at: usize,
}

/// The table is swept of dictionaries no text refers to once it reaches this many entries,
/// then at twice what is left: sweeping costs one pass per doubling.
const FIRST_SWEEP: usize = 64;

impl Dictionaries {
    /// `json` packed against the dictionary of `key` (its own text becomes the dictionary
    /// when `key` has none alive). A text that packing would not shrink stays plain.
    pub fn pack(&self, key: &str, json: PackedJson) -> PackedJson {
        let Packing::Plain(raw) = json.0 else {
            return json;
        };
        let text = raw.get();
        let Ok(len) = u32::try_from(text.len()) else {
            return PackedJson(Packing::Plain(raw));
        };
        let dictionary = {
            let mut table = self.table.lock().expect("dictionaries lock");
            match table.by_key.get(key).and_then(Weak::upgrade) {
                Some(dictionary) => dictionary,
                None => {
                    let dictionary: Arc<str> = Arc::from(text);
                    table
                        .by_key
                        .insert(key.to_string(), Arc::downgrade(&dictionary));
                    if table.by_key.len() >= table.sweep_at.max(FIRST_SWEEP) {
                        table.by_key.retain(|_, held| held.strong_count() > 0);
                        table.sweep_at = table.by_key.len() * 2;
                    }
                    dictionary
                }
            }
        };
        let bytes = lz4_flex::block::compress_with_dict(text.as_bytes(), dictionary.as_bytes());
        if bytes.len() >= text.len() {
            return PackedJson(Packing::Plain(raw));
        }
        PackedJson(Packing::Packed {
            dictionary,
            bytes: bytes.into_boxed_slice(),
            len,
        })
    }

    /// Keys known now (after the last sweep, some may be dead).
    pub fn len(&self) -> usize {
        self.table.lock().expect("dictionaries lock").by_key.len()
    }

    /// Whether no key is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn plain(text: &str) -> PackedJson {
        PackedJson::from(RawValue::from_string(text.to_string()).unwrap())
    }

    const SPEC: &str = r#"{"containers":[{"name":"engine","image":"engine:1","volumeMounts":[{"name":"kube-api-access-8smlf","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}]}],"nodeName":"kwok-node-0","volumes":[{"name":"kube-api-access-8smlf","projected":{"sources":[{"serviceAccountToken":{"path":"token"}}]}}]}"#;

    #[test]
    fn siblings_pack_small_against_one_dictionary_and_unpack_exactly() {
        let dictionaries = Dictionaries::default();
        let first = dictionaries.pack("ns/6cc4479f85", plain(SPEC));
        let sibling_text = SPEC
            .replace("8smlf", "x9q2k")
            .replace("kwok-node-0", "kwok-node-3");
        let sibling = dictionaries.pack("ns/6cc4479f85", plain(&sibling_text));
        assert!(sibling.is_packed() && first.is_packed());
        assert!(
            sibling.own_bytes() * 4 < sibling_text.len(),
            "{} of {}",
            sibling.own_bytes(),
            sibling_text.len()
        );
        assert_eq!(sibling.text().unwrap(), sibling_text);
        assert_eq!(first.text().unwrap(), SPEC);
        assert_eq!(
            serde_json::to_string(&sibling).unwrap(),
            sibling_text,
            "serialized as the text"
        );
        let Packing::Packed { dictionary: a, .. } = &first.0 else {
            unreachable!()
        };
        let Packing::Packed { dictionary: b, .. } = &sibling.0 else {
            unreachable!()
        };
        assert!(Arc::ptr_eq(a, b), "one dictionary for both");
    }

    #[test]
    fn another_key_never_packs_against_this_one() {
        let dictionaries = Dictionaries::default();
        let mine = dictionaries.pack("tenant-a/h", plain(SPEC));
        let theirs = dictionaries.pack("tenant-b/h", plain(SPEC));
        let (Packing::Packed { dictionary: a, .. }, Packing::Packed { dictionary: b, .. }) =
            (&mine.0, &theirs.0)
        else {
            unreachable!()
        };
        assert!(!Arc::ptr_eq(a, b));
    }

    #[test]
    fn dictionaries_no_text_refers_to_are_swept() {
        let dictionaries = Dictionaries::default();
        let kept = dictionaries.pack("kept", plain(SPEC));
        for n in 0..FIRST_SWEEP * 4 {
            drop(dictionaries.pack(&format!("gone-{n}"), plain(SPEC)));
        }
        assert!(dictionaries.len() < FIRST_SWEEP, "{}", dictionaries.len());
        assert_eq!(kept.text().unwrap(), SPEC);
    }

    proptest! {
        /// Whatever the dictionary and the text, the text unpacks exactly.
        #[test]
        fn any_text_unpacks_as_packed(
            dictionary in "[ -~]{0,300}",
            text in "[ -~]{0,300}",
        ) {
            let dictionaries = Dictionaries::default();
            let as_json = |s: &str| serde_json::to_string(s).unwrap();
            drop(dictionaries.pack("k", plain(&as_json(&dictionary))));
            let held = dictionaries.pack("k", plain(&as_json(&dictionary)));
            let packed = dictionaries.pack("k", plain(&as_json(&text)));
            prop_assert_eq!(packed.text().unwrap(), as_json(&text));
            prop_assert_eq!(held.text().unwrap(), as_json(&dictionary));
        }
    }
}
