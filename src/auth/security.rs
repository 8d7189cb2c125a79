//! The security step of `kache serve`'s pipeline: authenticate the client, honour its
//! `Impersonate-*` headers only if the upstream lets it impersonate, authorize reads kache
//! answers from cache, and say how a passed-through request carries the client's identity
//! (impersonation with kache's credentials, or the client's own bearer token).

use super::authn::{bearer, Authenticator, AuthnSettings};
use super::authz::{Authorizer, AuthzSettings};
use super::tls::CertIdentity;
use super::{impersonate, Attributes, Identity};
use crate::api::status::Status;
use crate::upstream::Credentials;
use crate::upstream::Upstream;
use http::HeaderMap;

/// How requests kache passes through carry the client's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Passthrough {
    /// kache's own credentials plus `Impersonate-*` headers naming the client.
    Impersonate,
    /// The client's own bearer token (clients without one are impersonated).
    Forward,
}

/// Settings of authentication, authorization and pass-through identity.
#[derive(Debug, Clone)]
pub struct SecuritySettings {
    /// Authentication.
    pub authn: AuthnSettings,
    /// Authorization.
    pub authz: AuthzSettings,
    /// Pass-through identity.
    pub passthrough: Passthrough,
}

/// Authentication and authorization against the upstream.
pub struct Security {
    /// Who the client is.
    pub authn: Authenticator,
    /// What it may do.
    pub authz: Authorizer,
    passthrough: Passthrough,
}

/// An authenticated client, after impersonation.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The identity requests are judged as (the impersonated one, if the client impersonates).
    pub identity: Identity,
    /// The client's bearer token, when that is how it authenticated.
    pub token: Option<String>,
    /// Who the per-client bounds count this request against: the user who authenticated
    /// (not whom it impersonates, so impersonation spreads no load); an anonymous client
    /// is told apart by its address (`system:anonymous@10.0.0.7`), see [`Caller::at`].
    pub client: String,
}

impl Caller {
    /// This caller as coming from `ip`: an anonymous client is counted by its address, not
    /// in one bucket with every other anonymous client.
    pub fn at(mut self, ip: Option<std::net::IpAddr>) -> Caller {
        if self.client == super::ANONYMOUS {
            if let Some(ip) = ip {
                self.client = format!("{}@{ip}", super::ANONYMOUS);
            }
        }
        self
    }
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security").field("passthrough", &self.passthrough).finish_non_exhaustive()
    }
}

impl Security {
    /// Security asking `upstream`.
    pub fn new(upstream: Upstream, settings: SecuritySettings) -> Security {
        Security {
            authn: Authenticator::new(upstream.clone(), settings.authn),
            authz: Authorizer::new(upstream, settings.authz),
            passthrough: settings.passthrough,
        }
    }

    /// Authenticate a request and apply the impersonation it asks for (each `impersonate`
    /// permission checked with the upstream, as the apiserver's impersonation filter does).
    /// `ip`: the client's address.
    pub async fn caller(&self, cert: Option<&CertIdentity>, headers: &HeaderMap, ip: Option<std::net::IpAddr>) -> Result<Caller, Status> {
        let identity = self.authn.authenticate(cert, headers, ip).await?;
        let token = if cert.is_none() { bearer(headers).map(str::to_string) } else { None };
        let client = identity.username.clone();
        let Some(wanted) = impersonate::requested(headers)? else {
            return Ok(Caller { identity, token, client });
        };
        for check in wanted.checks() {
            self.authz.authorize(&identity, &check).await?;
        }
        Ok(Caller { identity: wanted.identity(), token, client })
    }

    /// 403 unless the caller may do `a`.
    pub async fn authorize(&self, caller: &Caller, a: &Attributes) -> Result<(), Status> {
        self.authz.authorize(&caller.identity, a).await
    }

    /// Rewrite a pass-through request's headers to carry the caller's identity; says which
    /// credentials to send it with.
    pub fn outbound(&self, caller: &Caller, headers: &mut HeaderMap) -> Result<Credentials, Status> {
        if self.passthrough == Passthrough::Forward && caller.token.is_some() {
            // The upstream judges the client's own token and any impersonation it asks for.
            return Ok(Credentials::Client);
        }
        headers.remove(http::header::AUTHORIZATION);
        impersonate::write(headers, &caller.identity)?;
        Ok(Credentials::Kache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(user: &str, client: &str) -> Caller {
        Caller { identity: Identity { username: user.into(), ..Identity::default() }, token: None, client: client.into() }
    }

    #[test]
    fn anonymous_clients_are_told_apart_by_address_others_by_who_authenticated() {
        let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
        let a = caller(super::super::ANONYMOUS, super::super::ANONYMOUS).at(ip("10.0.0.7"));
        let b = caller(super::super::ANONYMOUS, super::super::ANONYMOUS).at(ip("10.0.0.8"));
        assert_eq!(a.client, "system:anonymous@10.0.0.7");
        assert_ne!(a.client, b.client, "not one bucket for every anonymous client");
        // An impersonating user is counted as itself, wherever it comes from.
        let carol = caller("alice", "carol").at(ip("10.0.0.7"));
        assert_eq!((carol.identity.username.as_str(), carol.client.as_str()), ("alice", "carol"));
    }
}
