//! Writer scenarios: each controller's writes, checked against a scripted API server, in the
//! manner of controller-rs's `ApiServerVerifier`. The scripted server keeps a store of
//! objects: it answers the caches' lists from it (their watches stay open and silent, so the
//! caches hold what a scenario seeded), applies creates, patches and deletes to it, refuses
//! what a scenario says, and records every write in order. A scenario runs real reconciles
//! over it and asserts the writes and the stored result. Beside the e2e suite, which runs the
//! same writers against a real kube-apiserver, not instead of it.

mod podgroups;
mod podset;
mod roleset;
mod stormservice;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use kube::Client;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::cache::podgroups::Lookup;
use super::cache::scope::Caches;
use super::kit::context::Context;
use super::kit::error::Error;
use super::kit::owner::{Owner, reconcile};
use crate::api::podgroup::{PodGroupCrds, Scheduler};
use crate::metrics::Metrics;

/// The namespace every scenario runs in.
pub const NAMESPACE: &str = "tenant";

/// One write the scripted server answered, in the order it came.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    /// `create`, `patch` or `delete`.
    pub verb: &'static str,
    /// The object's path (with `/status` for a status patch), without the query.
    pub path: String,
    /// The request's body.
    pub body: Value,
}

/// A write the scripted server refuses, as the API server would.
struct Refusal {
    verb: &'static str,
    path_contains: String,
    code: u16,
    message: String,
}

#[derive(Default)]
struct State {
    /// By path.
    objects: BTreeMap<String, Value>,
    writes: Vec<Write>,
    /// The paths of the single objects read or looked for (GET, lists and watches aside), in
    /// order.
    reads: Vec<String>,
    events: Vec<Value>,
    refusals: Vec<Refusal>,
    version: u64,
    generated: u64,
}

/// The scripted API server of one scenario.
#[derive(Clone, Default)]
pub struct ScriptedApi {
    state: Arc<Mutex<State>>,
}

/// The path of an object (`apiVersion`, `kind`, namespace and name), as the API server
/// routes it.
pub fn path_of(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    format!("{}/{name}", collection(api_version, kind))
}

/// The kinds the scripted API serves, and their resources.
const KINDS: [(&str, &str); 8] = [
    ("Pod", "pods"),
    ("Service", "services"),
    ("ControllerRevision", "controllerrevisions"),
    ("RoleSet", "rolesets"),
    ("PodSet", "podsets"),
    ("StormService", "stormservices"),
    ("Event", "events"),
    ("PodGroup", "podgroups"),
];

/// The path of a kind's objects in [`NAMESPACE`].
fn collection(api_version: &str, kind: &str) -> String {
    let plural = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, plural)| *plural)
        .unwrap_or_else(|| panic!("the scripted API serves no {kind}"));
    let root = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    format!("{root}/namespaces/{NAMESPACE}/{plural}")
}

/// An answer with a JSON body.
fn answer(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a response")
}

/// A `Status` failure, as the API server sends it.
fn failure(code: u16, reason: &str, message: &str) -> Response<Full<Bytes>> {
    answer(
        StatusCode::from_u16(code).expect("a status code"),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}),
    )
}

/// Whether `object` has the labels a `k=v,k2` selector asks for.
fn selected(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    selector
        .split(',')
        .filter(|s| !s.is_empty())
        .all(|term| match term.split_once('=') {
            Some((key, value)) => labels[key].as_str() == Some(value),
            None => !labels[term].is_null(),
        })
}

impl ScriptedApi {
    /// A server holding `objects`.
    pub fn holding(objects: impl IntoIterator<Item = Value>) -> Self {
        let api = Self::default();
        {
            let mut state = api.state.lock().unwrap();
            for mut object in objects {
                state.version += 1;
                object["metadata"]["resourceVersion"] = json!(state.version.to_string());
                object["metadata"]["namespace"] = json!(NAMESPACE);
                // Every stored object has a UID, as the API server gives one.
                if object["metadata"]["uid"].is_null() {
                    object["metadata"]["uid"] = json!(format!("uid-{}", state.version));
                }
                state.objects.insert(path_of(&object), object);
            }
        }
        api
    }

    /// Refuses every `verb` (`create`, `patch`, `delete`, `read`) of a path containing
    /// `path_contains` with `code` and `message`.
    pub fn refuse(&self, verb: &'static str, path_contains: &str, code: u16, message: &str) {
        self.state.lock().unwrap().refusals.push(Refusal {
            verb,
            path_contains: path_contains.into(),
            code,
            message: message.into(),
        });
    }

    /// The writes answered so far (events aside), in order.
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().unwrap().writes.clone()
    }

    /// The paths of the single objects read so far (not the caches' lists), in order.
    pub fn reads(&self) -> Vec<String> {
        self.state.lock().unwrap().reads.clone()
    }

    /// The reasons of the events published so far, in order.
    pub fn event_reasons(&self) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state
            .events
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The first event published with `reason`, as sent.
    pub fn event(&self, reason: &str) -> Option<Value> {
        let state = self.state.lock().unwrap();
        state.events.iter().find(|e| e["reason"] == reason).cloned()
    }

    /// Changes the stored object at `path` as a user's write would (a new version, and a new
    /// generation when the spec changed).
    pub fn edit(&self, path: &str, change: impl FnOnce(&mut Value)) {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        let version = state.version;
        let object = state.objects.get_mut(path).expect("the object is stored");
        let spec = object["spec"].clone();
        change(object);
        if object["spec"] != spec {
            let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
            object["metadata"]["generation"] = json!(generation + 1);
        }
        object["metadata"]["resourceVersion"] = json!(version.to_string());
    }

    /// Deletes the stored object at `path`, as a user's delete would.
    pub fn remove(&self, path: &str) {
        let mut state = self.state.lock().unwrap();
        state.objects.remove(path).expect("the object is stored");
    }

    /// The stored object at `path`.
    pub fn object(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// The stored objects of `kind` (`apiVersion`, `kind`).
    pub fn objects(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let prefix = format!("{}/", collection(api_version, kind));
        let state = self.state.lock().unwrap();
        state
            .objects
            .iter()
            .filter(|(path, _)| path.starts_with(&prefix) && !path[prefix.len()..].contains('/'))
            .map(|(_, object)| object.clone())
            .collect()
    }

    /// A context of `O`'s controller over this server, its caches filled from what it holds;
    /// no PodGroup CRD is known to be served.
    pub async fn context<O: Owner>(&self) -> Arc<Context> {
        self.context_serving::<O>(PodGroupCrds::Unknown).await
    }

    /// A context of `O`'s controller over this server whose cluster serves the coscheduling
    /// PodGroup CRD, its caches (the PodGroups' too) filled from what it holds.
    pub async fn context_with_coscheduling<O: Owner>(&self) -> Arc<Context> {
        let ctx = self
            .context_serving::<O>(PodGroupCrds::known([Scheduler::Coscheduling]))
            .await;
        let filled = async {
            while ctx
                .caches
                .podgroups
                .lookup(Scheduler::Coscheduling, NAMESPACE, "")
                == Lookup::Starting
            {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), filled)
            .await
            .expect("the PodGroup cache fills from the scripted list");
        ctx
    }

    async fn context_serving<O: Owner>(&self, crds: PodGroupCrds) -> Arc<Context> {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.serve(request).await) }
        });
        let client = Client::new(service, NAMESPACE);
        let metrics = Arc::new(Metrics::default());
        let (caches, drivers) = Caches::new(
            &client,
            Some(NAMESPACE),
            &metrics,
            tokio::sync::watch::channel(crds).1,
        );
        for driver in drivers {
            tokio::spawn(driver);
        }
        tokio::time::timeout(std::time::Duration::from_secs(10), caches.ready())
            .await
            .expect("the caches fill from the scripted lists");
        Arc::new(Context::new(O::CONTROLLER, client, caches, metrics))
    }

    /// One reconcile of the stored `O` at `path`, as its controller runs it.
    pub async fn reconcile<O: Owner>(
        &self,
        ctx: &Arc<Context>,
        path: &str,
    ) -> Result<Action, Error> {
        let object: O = serde_json::from_value(self.object(path).expect("the object is stored"))
            .expect("the stored object decodes");
        reconcile(Arc::new(object), ctx.clone()).await
    }

    async fn serve(&self, request: Request<kube::client::Body>) -> Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or_default().to_string();
        let param = |key: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                .map(|v| v.replace("%3D", "=").replace("%2C", ","))
        };
        if parts.method == Method::GET && param("watch").as_deref() == Some("true") {
            // The caches' watches: open, and silent.
            return futures::future::pending().await;
        }
        let content_type = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let mut state = self.state.lock().unwrap();
        if path.ends_with("/events") {
            state.events.push(body.clone());
            return answer(StatusCode::CREATED, &body);
        }
        let verb = match parts.method {
            Method::POST => "create",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "read",
        };
        if let Some(refusal) = state
            .refusals
            .iter()
            .find(|r| r.verb == verb && path.contains(&r.path_contains))
        {
            return failure(refusal.code, "Refused", &refusal.message.clone());
        }
        match parts.method {
            Method::GET => match state.objects.get(&path).cloned() {
                Some(object) => {
                    state.reads.push(path);
                    answer(StatusCode::OK, &object)
                }
                // A path ending in a resource is a collection: a list.
                None if KINDS.iter().any(|(_, p)| path.ends_with(&format!("/{p}"))) => {
                    let selector = param("labelSelector").unwrap_or_default();
                    let prefix = format!("{path}/");
                    let items: Vec<Value> = state
                        .objects
                        .iter()
                        .filter(|(p, o)| {
                            p.starts_with(&prefix)
                                && !p[prefix.len()..].contains('/')
                                && selected(o, &selector)
                        })
                        .map(|(_, o)| o.clone())
                        .collect();
                    answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "v1", "kind": "List",
                            "metadata": {"resourceVersion": state.version.to_string()}, "items": items}),
                    )
                }
                None => {
                    state.reads.push(path);
                    failure(404, "NotFound", "not found")
                }
            },
            Method::POST => {
                let mut object = body.clone();
                if object["metadata"]["name"].is_null() {
                    state.generated += 1;
                    let prefix = object["metadata"]["generateName"]
                        .as_str()
                        .unwrap_or_default();
                    object["metadata"]["name"] = json!(format!("{prefix}{:05}", state.generated));
                }
                object["metadata"]["namespace"] = json!(NAMESPACE);
                let at = format!(
                    "{path}/{}",
                    object["metadata"]["name"].as_str().unwrap_or_default()
                );
                if state.objects.contains_key(&at) {
                    return failure(409, "AlreadyExists", "already exists");
                }
                state.version += 1;
                object["metadata"]["resourceVersion"] = json!(state.version.to_string());
                object["metadata"]["uid"] = json!(format!("uid-{}", state.version));
                state.writes.push(Write {
                    verb,
                    path: at.clone(),
                    body,
                });
                state.objects.insert(at, object.clone());
                answer(StatusCode::CREATED, &object)
            }
            Method::PATCH => {
                let item = path.strip_suffix("/status").unwrap_or(&path).to_string();
                let Some(mut object) = state.objects.get(&item).cloned() else {
                    return failure(404, "NotFound", "not found");
                };
                let stored_version = object["metadata"]["resourceVersion"].clone();
                if content_type.contains("json-patch") {
                    // The API server's JSON patch takes an absent field for `null` in a
                    // `test` (kube's finalizer helper tests a missing list so).
                    let mut ops = body.as_array().cloned().unwrap_or_default();
                    ops.retain(|op| {
                        !(op["op"] == "test"
                            && op["value"].is_null()
                            && op["path"]
                                .as_str()
                                .is_some_and(|path| object.pointer(path).is_none()))
                    });
                    let patch: json_patch::Patch =
                        serde_json::from_value(Value::Array(ops)).expect("a JSON patch");
                    if json_patch::patch(&mut object, &patch).is_err() {
                        return failure(422, "Invalid", "the patch does not apply");
                    }
                } else {
                    json_patch::merge(&mut object, &body);
                }
                // A write guarded by the version it was decided from conflicts with a newer one.
                if object["metadata"]["resourceVersion"] != stored_version {
                    return failure(409, "Conflict", "the object has been modified");
                }
                state.version += 1;
                object["metadata"]["resourceVersion"] = json!(state.version.to_string());
                state.writes.push(Write { verb, path, body });
                state.objects.insert(item, object.clone());
                answer(StatusCode::OK, &object)
            }
            Method::DELETE => {
                let Some(object) = state.objects.get(&path).cloned() else {
                    return failure(404, "NotFound", "not found");
                };
                let uid = &body["preconditions"]["uid"];
                if !uid.is_null() && *uid != object["metadata"]["uid"] {
                    return failure(409, "Conflict", "the UID precondition failed");
                }
                state.writes.push(Write {
                    verb,
                    path: path.clone(),
                    body,
                });
                state.objects.remove(&path);
                answer(StatusCode::OK, &object)
            }
            _ => failure(405, "MethodNotAllowed", "not served"),
        }
    }
}

/// The writes of `verb` among `writes`, by path.
pub fn paths(writes: &[Write], verb: &str) -> Vec<String> {
    writes
        .iter()
        .filter(|w| w.verb == verb)
        .map(|w| w.path.clone())
        .collect()
}
