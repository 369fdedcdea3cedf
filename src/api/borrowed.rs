//! Strings and int-or-strings read from a document without copying it: borrowed unless JSON
//! escapes had to be decoded. The admission views read every string this way, and the typed
//! API converts to them, so one rule serves both (a budget or a pause `duration`).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// A string of the document: borrowed unless JSON escapes had to be decoded — also inside
/// an `Option`, a list or a map, where serde's own `Cow` would always copy.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Str<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Str<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for Str<'_> {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Str<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl Serialize for Str<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// An integer or a string (`IntOrString`), the string borrowed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum IntOrStr<'a> {
    /// An integer.
    Int(i32),
    /// A string.
    Str(Str<'a>),
}

impl<'a> From<&'a IntOrString> for IntOrStr<'a> {
    fn from(value: &'a IntOrString) -> Self {
        match value {
            IntOrString::Int(n) => Self::Int(*n),
            IntOrString::String(s) => Self::Str(Str(Cow::Borrowed(s))),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for IntOrStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntOrStrVisitor;
        impl<'de> Visitor<'de> for IntOrStrVisitor {
            type Value = IntOrStr<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a string")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                i32::try_from(v)
                    .map(IntOrStr::Int)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i32::try_from(v)
                    .map(IntOrStr::Int)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(IntOrStr::Str(Str(Cow::Borrowed(v))))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(IntOrStr::Str(Str(Cow::Owned(v.to_string()))))
            }
        }
        deserializer.deserialize_any(IntOrStrVisitor)
    }
}
