//! Values held once however many objects carry them. Thousands of RoleSets and
//! StormServices carry the same few pod templates (one per role and revision), and a decoded
//! pod template is several kilobytes of fixed-size structs: the caches hold one copy per
//! distinct template ([`Shared::share`]), and every object points at it.
//!
//! A [`Shared`] reads and writes as the value it holds: it serializes, deserializes and
//! describes its schema as `T`, derefs to `T`, and a write through it copies the value first
//! when others hold it too (copy on write), so code that renders or defaults a template never
//! changes another object's.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that may be held by many objects at once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    /// A value of its own (shared once [`Shared::share`] finds an equal one).
    pub fn new(value: T) -> Self {
        Self(Arc::new(value))
    }

    /// Whether `a` and `b` are one copy.
    pub fn same(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T: Clone> Shared<T> {
    /// The value, copied when others hold it.
    pub fn into_inner(self) -> T {
        Arc::unwrap_or_clone(self.0)
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

/// A shared collection iterates as the collection (a write copies it first).
impl<'a, T> IntoIterator for &'a Shared<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        (&**self).into_iter()
    }
}

impl<'a, T: Clone> IntoIterator for &'a mut Shared<T>
where
    &'a mut T: IntoIterator,
{
    type Item = <&'a mut T as IntoIterator>::Item;
    type IntoIter = <&'a mut T as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        (&mut **self).into_iter()
    }
}

impl<T: Clone + IntoIterator> IntoIterator for Shared<T> {
    type Item = T::Item;
    type IntoIter = T::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        self.into_inner().into_iter()
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Self::new)
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Shared<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

/// The distinct values of one type held now, by the hash of their JSON: each entry lives
/// while an object holds its value, and dead entries are swept whenever the table doubles.
pub struct Interner<T> {
    table: Mutex<Table<T>>,
}

struct Table<T> {
    by_hash: HashMap<u64, Weak<T>>,
    sweep_at: usize,
}

/// The table is swept of values no object holds once it reaches this many entries, then
/// at twice what is left: sweeping costs one pass per doubling.
const FIRST_SWEEP: usize = 64;

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self {
            table: Mutex::new(Table {
                by_hash: HashMap::new(),
                sweep_at: FIRST_SWEEP,
            }),
        }
    }
}

impl<T: Serialize + PartialEq> Interner<T> {
    /// The one copy of `value`'s content: an equal value already held, or `value` itself,
    /// now known. A hash that two different values share keeps each its own copy.
    pub fn share(&self, value: Shared<T>) -> Shared<T> {
        let Ok(json) = serde_json::to_vec(&*value) else {
            return value;
        };
        let mut hasher = DefaultHasher::new();
        json.hash(&mut hasher);
        let hash = hasher.finish();
        let mut table = self.table.lock().expect("interner lock");
        if let Some(held) = table.by_hash.get(&hash).and_then(Weak::upgrade) {
            return if *held == *value { Shared(held) } else { value };
        }
        table.by_hash.insert(hash, Arc::downgrade(&value.0));
        if table.by_hash.len() >= table.sweep_at {
            table.by_hash.retain(|_, held| held.strong_count() > 0);
            table.sweep_at = (table.by_hash.len() * 2).max(FIRST_SWEEP);
        }
        value
    }

    /// Distinct values held now (after the last sweep, some may be dead).
    pub fn len(&self) -> usize {
        self.table.lock().expect("interner lock").by_hash.len()
    }

    /// Whether no value is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_become_one_copy_and_a_write_copies_first() {
        let interner = Interner::<Vec<String>>::default();
        let a = interner.share(Shared::new(vec!["engine:1".to_string()]));
        let b = interner.share(Shared::new(vec!["engine:1".to_string()]));
        let c = interner.share(Shared::new(vec!["engine:2".to_string()]));
        assert!(Shared::same(&a, &b), "equal content: one copy");
        assert!(!Shared::same(&a, &c));
        let mut written = b.clone();
        written.push("sidecar:1".into());
        assert_eq!(*a, ["engine:1"], "a write never reaches the other holders");
        assert_eq!(*written, ["engine:1", "sidecar:1"]);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"["engine:1"]"#,
            "serialized as the value"
        );
    }

    #[test]
    fn values_no_object_holds_are_swept_as_the_table_grows() {
        let interner = Interner::<u32>::default();
        let kept = interner.share(Shared::new(0));
        for n in 1..=(FIRST_SWEEP as u32 * 4) {
            drop(interner.share(Shared::new(n)));
        }
        assert!(interner.len() < FIRST_SWEEP, "{}", interner.len());
        assert!(Shared::same(&kept, &interner.share(Shared::new(0))));
    }
}
