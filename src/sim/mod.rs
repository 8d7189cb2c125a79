//! The simulated kube-apiserver: the test upstream and `kache sim`. It keeps every kind in a
//! [`KindCache`] (the same store and read path `kache serve` uses) and is its only writer:
//! writes take one global lock, get the next resourceVersion (like etcd's revision), are
//! encoded once (JSON and, for built-in kinds, protobuf) and applied. Its custom resources
//! have CRDs it serves (read only), whose printer columns print their Tables ([`crd`]). With
//! [`SimAuth`] it authenticates, honours impersonation, authorizes every request by its RBAC
//! rules, serves TokenReview and SubjectAccessReview, and keeps an audit log; without, it is
//! open.

pub mod catalog;

pub mod crd;

pub mod fault;

pub mod launch;

pub mod synth;

mod churn;
mod openapi;
mod patch;
pub(crate) mod rbac;
mod review;
mod table;
mod write;

pub use churn::{churn, leases};
pub use rbac::{AuditRecord, SimAuth};

use crate::api::media::{negotiate, Format, Negotiated, View};
use crate::api::query::Options;
use crate::api::resource::{Resource, ResourceRef};
use crate::api::route::{classify, ResourcePath, Target};
use crate::api::status::Status;
use crate::api::table::CustomColumns;
use crate::api::transcode::{json_to_pb, MessageType};
use crate::auth::{impersonate, Attributes};
use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::cache::object::{self, Object};
use crate::cache::{KindCache, Limits};
use crate::serve::handler::table::Include;
use crate::serve::handler::{self, WatchSettings};
use crate::serve::respond::respond;
use crate::serve::respond::StatusResponse;
use crate::serve::server::{Handler, Peer};
use crate::sim::synth::{ClusterSpec, Synth};
use http::{header, Method, Request, Response, StatusCode};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How the simulator is set up.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The synthetic cluster to start with.
    pub cluster: ClusterSpec,
    /// Buffer sizes of every kind.
    pub limits: Limits,
    /// Watch timing.
    pub watch: WatchSettings,
    /// Address reported in `/api` discovery.
    pub advertise: String,
}

/// The simulated apiserver.
pub struct Sim {
    resources: Vec<ResourceRef>,
    caches: HashMap<(String, String), Arc<KindCache>>,
    /// The global resourceVersion; holding the lock is holding the write path.
    rv: Mutex<u64>,
    watch: WatchSettings,
    advertise: String,
    synth: Synth,
    auth: Option<Arc<SimAuth>>,
    faults: fault::SimFaults,
}

impl Sim {
    /// Generate the cluster and load it.
    pub fn new(cfg: SimConfig) -> Result<Sim, Status> {
        let synth = Synth::new(cfg.cluster.clone());
        let resources: Vec<ResourceRef> = catalog::simulated().into_iter().map(Arc::new).collect();
        let crds: Vec<Value> = synth.crds(&resources).collect();
        let mut rv = 1000u64;
        let mut caches = HashMap::new();
        for r in &resources {
            // A custom resource's Tables print with the columns of the CRD served below.
            let custom = if r.custom() { Some(crd::columns(&crds, r)?) } else { None };
            let values: Box<dyn Iterator<Item = Value>> = match r.plural.as_str() {
                "namespaces" => Box::new(synth.namespaces()),
                "nodes" => Box::new(synth.nodes()),
                "pods" => Box::new(synth.pods()),
                "deployments" => Box::new(synth.deployments()),
                "services" => Box::new(synth.services()),
                "configmaps" => Box::new(synth.configmaps()),
                "secrets" => Box::new(synth.secrets()),
                "events" => Box::new(synth.events()),
                catalog::CRD_PLURAL => Box::new(crds.iter().cloned()),
                _ => Box::new(std::iter::empty()),
            };
            let mut objects = Vec::new();
            for mut v in values {
                rv += 1;
                // The cluster's identity (what kache's saved states are checked against):
                // new with each simulator, as a real cluster's is with its storage.
                if r.plural == "namespaces" && v["metadata"]["name"] == "kube-system" {
                    v["metadata"]["uid"] = Value::String(uuid::Uuid::new_v4().to_string());
                }
                v["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                objects.push(encode_printed(r, &v, custom.as_ref())?);
            }
            // The simulated apiserver prints every Table itself, whatever its cells cost.
            let cache = KindCache::new(r.clone(), rv, Limits { table_cell_bytes: usize::MAX, ..cfg.limits });
            cache.replace_printed(objects, rv, custom);
            caches.insert((r.group.clone(), r.plural.clone()), Arc::new(cache));
        }
        for c in caches.values() {
            c.advance(rv, false);
        }
        Ok(Sim {
            resources,
            caches,
            rv: Mutex::new(rv),
            watch: cfg.watch.clone(),
            advertise: cfg.advertise,
            synth,
            auth: None,
            faults: Default::default(),
        })
    }

    /// Check every request with `auth` (users, RBAC, impersonation) and keep an audit log.
    pub fn with_auth(mut self, auth: SimAuth) -> Sim {
        self.auth = Some(Arc::new(auth));
        self
    }

    /// Every request judged so far (empty for an open simulator).
    pub fn audit(&self) -> Vec<AuditRecord> {
        self.auth.as_ref().map(|a| a.audit()).unwrap_or_default()
    }

    /// The cache of a resource.
    pub fn cache(&self, group: &str, plural: &str) -> Option<&Arc<KindCache>> {
        self.caches.get(&(group.to_string(), plural.to_string()))
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        *self.rv.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// End every open watch, as an apiserver restart would; clients resume from their RV.
    pub fn disconnect_watchers(&self) {
        let _rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        for c in self.caches.values() {
            c.end_watchers();
        }
    }

    /// Forget all event history, as an etcd compaction followed by a watch-cache restart
    /// would: the revision moves on by one and watches from any earlier RV get 410 Expired.
    /// Open watches are ended.
    pub fn compact(&self) {
        let mut rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        *rv += 1;
        for c in self.caches.values() {
            let objects: Vec<Object> = c.snapshot().objects.values().map(|o| (**o).clone()).collect();
            c.replace(objects, *rv);
        }
    }

    /// Tell every kind how far the global resourceVersion has moved, as etcd's periodic
    /// progress notification does for the apiserver's watch caches (rarely: between them a
    /// quiet kind's bookmarks stay at its own newest event, as on a real apiserver).
    pub fn tick(&self) {
        let rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        for c in self.caches.values() {
            c.advance(*rv, true);
        }
    }

    /// A leases' write: the global resourceVersion moves on with no change to any kind kache
    /// caches, as a real cluster's lease renewals (every node's, every 10 s) move it. The
    /// leases themselves are not served.
    pub fn renew_lease(&self) {
        *self.rv.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    /// What the apiserver's watch cache does before a read that needs the current state (a
    /// consistent read, or an RV newer than the kind has seen): it asks etcd for progress and
    /// waits until it has caught up with the current revision.
    fn request_progress(&self, cache: &KindCache, needed: Option<u64>) {
        if needed.is_some_and(|n| n <= cache.progress()) {
            return;
        }
        let rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        cache.advance(*rv, true);
    }

    /// Answer `req`, whose path `answer` classified as `target`.
    async fn route<B: RequestBody>(self: Arc<Self>, req: Request<B>, target: Option<Target>) -> Result<Response<Body>, Status> {
        let path = req.uri().path().to_string();
        if req.method() == Method::POST {
            match path.as_str() {
                review::TOKEN_REVIEWS => return review::token(self.auth.as_deref(), req).await,
                review::ACCESS_REVIEWS => return review::access(self.auth.as_deref(), req).await,
                review::SELF_REVIEWS => {
                    let id = req.extensions().get::<crate::auth::Identity>().cloned().unwrap_or_else(crate::auth::Identity::anonymous);
                    return Ok(review::whoami(&id));
                }
                _ => {}
            }
        }
        if path == "/openapi/v3" {
            return Ok(discovery(openapi::index(&self.resources), false));
        }
        if let Some(gv) = path.strip_prefix("/openapi/v3/") {
            return openapi::group_version(&self.resources, gv).map(|v| discovery(v, false)).ok_or_else(Status::no_route);
        }
        match target.ok_or_else(Status::no_route)? {
            Target::Version => Ok(discovery(catalog::version(), true)),
            Target::Api => Ok(discovery(catalog::api_versions(&self.advertise), false)),
            Target::Apis => Ok(discovery(catalog::group_list(&self.resources), false)),
            Target::Group(g) => catalog::group(&self.resources, &g).map(|v| discovery(v, false)).ok_or_else(Status::no_route),
            Target::GroupVersion(g, v) => {
                if !self.resources.iter().any(|r| r.group == g && r.version == v) {
                    return Err(Status::no_route());
                }
                Ok(discovery(catalog::resource_list(&self.resources, &g, &v), false))
            }
            Target::Health => Ok(respond(StatusCode::OK, "text/plain; charset=utf-8", body::full("ok"))),
            Target::Resource(p) => self.resource(req, p).await,
        }
    }

    async fn resource<B: RequestBody>(self: Arc<Self>, req: Request<B>, p: ResourcePath) -> Result<Response<Body>, Status> {
        let cache = self
            .resources
            .iter()
            .find(|r| r.group == p.group && r.version == p.version && r.plural == p.plural)
            .and_then(|r| self.cache(&r.group, &r.plural))
            .cloned()
            .ok_or_else(Status::no_route)?;
        let r = cache.resource.clone();
        if !p.in_scope(r.namespaced) {
            return Err(Status::no_route());
        }
        if catalog::read_only(&r) && req.method() != Method::GET {
            return Err(Status::method_not_allowed());
        }
        if req.method() == Method::GET && self.faults.initializing() {
            return Err(Status::too_many_requests("storage is (re)initializing", 1));
        }
        let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (fmt, view) = match negotiate(accept.as_deref(), catalog::serves_protobuf(&r)) {
            // Kinds kache prints (built-in printers, CRDs' columns) answer GET, LIST and
            // WATCH through the read path; the rest (and `includeObject=Object`) through the
            // simulator's own tables.
            Negotiated::Serve(f, v @ View::Table { .. })
                if cache.snapshot().printer(&r.group, &r.plural).is_some()
                    && req.method() == Method::GET
                    && Options::parse(req.uri().query()).is_ok_and(|o| Include::parse(o.include_object.as_deref()).is_some()) =>
            {
                (f, v)
            }
            Negotiated::Serve(_, View::Table { .. }) => return table::respond(&cache, &req, &p, self.watch.clone()).await,
            Negotiated::Serve(f, v) => (f, v),
            _ => return Err(Status::not_acceptable("application/json, application/yaml, application/vnd.kubernetes.protobuf")),
        };
        if let View::Metadata { list, .. } = view {
            metadata_fits(&r, &req, &p, list)?;
        }
        self.serve_verb(&cache, req, &p, fmt, view).await
    }

    /// A request for `cache`'s resource, its encoding and view negotiated, carried out by
    /// its verb (the read path's handlers, or the simulator's writes).
    async fn serve_verb<B: RequestBody>(
        &self,
        cache: &Arc<KindCache>,
        req: Request<B>,
        p: &ResourcePath,
        fmt: Format,
        view: View,
    ) -> Result<Response<Body>, Status> {
        let ns = p.namespace.as_deref();
        match (req.method().clone(), p.name.as_deref(), p.subresource.as_deref()) {
            (Method::GET, Some(name), None | Some("status")) => {
                let include = Options::parse(req.uri().query())?.include_object;
                handler::get(cache, ns, name, fmt, view, Include::parse(include.as_deref()).unwrap_or(Include::Metadata))
            }
            (Method::GET, None, None) => {
                let opts = Options::parse(req.uri().query())?;
                if opts.cont.is_none() && opts.rv != Some(0) {
                    self.request_progress(cache, opts.rv);
                }
                if opts.watch {
                    let req = handler::WatchRequest { namespace: p.namespace.clone(), opts, fmt, view, settings: self.watch.clone() };
                    handler::watch(cache.clone(), req, None).await
                } else {
                    handler::list(cache, ns, &opts, fmt, view).await
                }
            }
            (Method::GET, Some(name), Some("log")) if cache.resource.kind == "Pod" => write::log(cache, ns, name),
            (Method::POST, None, None) => self.create(cache, req, p, fmt).await,
            (Method::PUT, Some(_), None | Some("status")) => self.update(cache, req, p, fmt).await,
            (Method::PATCH, Some(_), None | Some("status")) => self.patch(cache, req, p, fmt).await,
            (Method::DELETE, Some(name), None) => {
                let dry = write::delete_is_dry_run(req).await?;
                self.delete(cache, ns, name, fmt, dry)
            }
            (Method::DELETE, None, None) if catalog::allows_delete_collection(&cache.resource) => {
                let query = req.uri().query().map(str::to_string);
                let dry = write::delete_is_dry_run(req).await?;
                self.delete_collection(cache, ns, query.as_deref(), fmt, dry)
            }
            (_, _, Some(_)) => Err(Status::no_route()),
            _ => Err(Status::method_not_allowed()),
        }
    }
}

impl Sim {
    /// Authenticate, apply impersonation and authorize, as the apiserver's filters do; on
    /// success the acting identity is put in the request's extensions.
    fn admit<B: RequestBody>(auth: &SimAuth, req: &mut Request<B>, attrs: &Attributes) -> Result<(), Box<Refused>> {
        let refuse = |status, user, impersonator| Box::new(Refused { status, user, impersonator });
        let cert = req.extensions().get::<Peer>().and_then(|p| p.cert.clone());
        let user = auth.authenticate(cert.as_deref(), req.headers()).map_err(|s| refuse(s, crate::auth::Identity::anonymous(), None))?;
        let (acting, impersonator) = match impersonate::requested(req.headers()).map_err(|s| refuse(s, user.clone(), None))? {
            None => (user, None),
            Some(wanted) => {
                if let Some(denied) = wanted.checks().into_iter().find(|c| !auth.allows(&user, c)) {
                    return Err(refuse(denied.forbidden(&user.username, ""), user, None));
                }
                (wanted.identity(), Some(user.username))
            }
        };
        if !auth.allows(&acting, attrs) {
            return Err(refuse(attrs.forbidden(&acting.username, ""), acting, impersonator));
        }
        req.extensions_mut().insert(acting.clone());
        req.extensions_mut().insert(Impersonator(impersonator));
        Ok(())
    }
}

/// A request the simulator's filters refused, and whom it was judged as.
struct Refused {
    status: Status,
    user: crate::auth::Identity,
    impersonator: Option<String>,
}

/// Who impersonated the acting user of a request, if anyone (a request extension).
#[derive(Debug, Clone)]
struct Impersonator(Option<String>);

/// A request's body, up to `limit` bytes; a larger or broken one is the apiserver's 413.
async fn read_body<B: RequestBody>(req: Request<B>, limit: usize) -> Result<bytes::Bytes, Status> {
    use http_body_util::{BodyExt, Limited};
    Ok(Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|e| Status::failure(413, "RequestEntityTooLarge", format!("request body rejected: {e}")))?
        .to_bytes())
}

impl Handler for Sim {
    async fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> Response<Body> {
        // Large answers gzipped for clients that ask, as the apiserver's APIResponseCompression.
        let gzip = crate::api::media::accepts_gzip(req.headers());
        let resp = self.answer(req).await;
        if gzip {
            // The simulated apiserver compresses every answer it is asked to (no bound).
            static UNBOUNDED: std::sync::OnceLock<crate::serve::compress::Encodes> = std::sync::OnceLock::new();
            crate::serve::compress::gzip(resp, UNBOUNDED.get_or_init(|| crate::serve::compress::Encodes::new(0)))
        } else {
            resp
        }
    }
}

impl Sim {
    async fn answer<B: RequestBody>(self: Arc<Self>, mut req: Request<B>) -> Response<Body> {
        let delay = self.faults.delay(req.uri().path());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let protobuf = crate::api::media::wants_protobuf(req.headers());
        let target = classify(req.uri().path());
        let Some(auth) = self.auth.clone() else {
            return self.route(req, target).await.unwrap_or_else(|status| status.into_response(protobuf));
        };
        let attributes = Attributes::of(req.method(), req.uri().path(), target.as_ref(), req.uri().query());
        if let Err(refusal) = Self::admit(&auth, &mut req, &attributes) {
            let Refused { status, user, impersonator } = *refusal;
            auth.record(AuditRecord { user, impersonator, attributes, code: status.code });
            return status.into_response(protobuf);
        }
        let user = req.extensions().get::<crate::auth::Identity>().cloned().unwrap_or_default();
        let impersonator = req.extensions().get::<Impersonator>().and_then(|i| i.0.clone());
        let resp = self.route(req, target).await.unwrap_or_else(|status| status.into_response(protobuf));
        auth.record(AuditRecord { user, impersonator, attributes, code: resp.status().as_u16() });
        resp
    }
}

/// Encode a JSON object of resource `r` once, in every encoding the simulator serves it in.
pub fn encode(r: &Resource, v: &Value) -> Result<Object, Status> {
    encode_printed(r, v, None)
}

/// [`encode`], a custom resource's Table cells computed with its CRD's columns `custom`.
pub fn encode_printed(r: &Resource, v: &Value, custom: Option<&Arc<CustomColumns>>) -> Result<Object, Status> {
    let json = object::list_item_json(r, v);
    let pb = if catalog::serves_protobuf(r) {
        let ty = MessageType::for_kind(&r.group, &r.version, &r.kind)
            .ok_or_else(|| Status::internal(format!("no protobuf schema for {}", r.kind)))?;
        Some(json_to_pb(ty, v).map_err(|e| Status::invalid(&r.kind, v["metadata"]["name"].as_str().unwrap_or(""), &e.to_string()))?)
    } else {
        None
    };
    Object::printed(r, v, Some(&json), pb.as_deref(), custom).map_err(|e| Status::bad_request(e.to_string()))
}

/// A discovery document (`/version` is indented, the rest compact with a newline).
fn discovery(v: Value, indented: bool) -> Response<Body> {
    let bytes = if indented {
        serde_json::to_vec_pretty(&v).unwrap_or_default()
    } else {
        let mut b = crate::api::json::to_vec(&v);
        b.push(b'\n');
        b
    };
    respond(StatusCode::OK, "application/json", body::full(bytes))
}

/// Content type of a single-object response.
fn object_response(r: &Resource, o: &Object, code: StatusCode, fmt: Format) -> Response<Body> {
    let body = match fmt {
        Format::Json => {
            let mut out = Vec::new();
            object::whole_json(r, &mut out, &o.json_item().unwrap_or_default());
            out.push(b'\n');
            out
        }
        Format::Protobuf => crate::api::wire::envelope(&r.api_version(), &r.kind, o.pb_message_ref().unwrap_or_default()),
    };
    let ct = if fmt == Format::Json { "application/json" } else { crate::api::wire::PROTOBUF };
    respond(code, ct, body::full(body))
}

/// Whether a metadata view fits the request, with the apiserver's 406 when it does not:
/// PartialObjectMetadataList is for LISTs, PartialObjectMetadata for single objects (GET,
/// WATCH events, and what writes return). The message names the internal Go type.
fn metadata_fits<B>(r: &Resource, req: &Request<B>, p: &ResourcePath, list: bool) -> Result<(), Status> {
    let watch = crate::api::query::watch_requested(req.uri().query());
    let is_list = req.method() == Method::GET && p.name.is_none() && !watch;
    let package = if r.group.is_empty() { "core" } else { r.group.split('.').next().unwrap_or("") };
    let go_type =
        |suffix: &str| if r.protobuf { format!("*{package}.{}{suffix}", r.kind) } else { format!("*unstructured.Unstructured{suffix}") };
    match (list, is_list) {
        (false, true) => Err(Status::not_acceptable_message(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type("List")
        ))),
        (true, false) => Err(Status::not_acceptable_message(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type("")
        ))),
        _ => Ok(()),
    }
}
