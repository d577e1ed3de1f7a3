//! The tower skeleton every middleware of the servers shares, so that each keeps only its
//! own logic.
//!
//! ```text
//!  Middleware<M> (the tower Layer) ─ layer(inner) ─▶ Wrapped<M, S> { inner, M }
//!    HTTP (before jsonrpsee):  Service<HttpRequest<B>>  ─▶ HttpMiddleware::call(&M, &mut inner, req)
//!    RPC (after jsonrpsee):    RpcServiceT              ─▶ RpcMiddleware::{call, notification, batch}
//! ```
//!
//! `M` is the middleware's state (its limits, tables, policy), cloned into each service
//! the layer makes. An HTTP middleware answers a request itself ([`answer`]) or hands it
//! on ([`pass`], or [`take_ready`] for a service it calls after an await); readiness is
//! the wrapped service's, its errors boxed. An RPC middleware passes what it does not
//! look at straight through (the trait's defaults).

use jsonrpsee::core::BoxError;
use jsonrpsee::core::middleware::{Batch, Notification, Request, RpcServiceT};
use jsonrpsee::core::server::MethodResponse;
use jsonrpsee::server::{HttpRequest, HttpResponse};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// What an HTTP middleware's service answers with.
pub type BoxFuture = Pin<Box<dyn Future<Output = Result<HttpResponse, BoxError>> + Send>>;

/// A service an HTTP middleware wraps: the rest of the HTTP stack, down to jsonrpsee.
pub trait HttpService<B>:
    Service<
        HttpRequest<B>,
        Response = HttpResponse,
        Error: Into<BoxError> + 'static,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> HttpService<B> for S
where
    S: Service<HttpRequest<B>, Response = HttpResponse> + Clone + Send + 'static,
    S::Error: Into<BoxError> + 'static,
    S::Future: Send + 'static,
{
}

/// An RPC service a call middleware wraps: the rest of the call stack, down to the
/// method table.
pub trait RpcService:
    RpcServiceT<
        MethodResponse = MethodResponse,
        BatchResponse = MethodResponse,
        NotificationResponse = MethodResponse,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> RpcService for S where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// One HTTP middleware's logic.
pub trait HttpMiddleware<B>: Clone {
    /// The answer to `req`: the middleware's own, or `inner`'s (made ready for this call).
    fn call<S: HttpService<B>>(&self, inner: &mut S, req: HttpRequest<B>) -> BoxFuture;
}

/// One call middleware's logic; what it does not override passes straight through.
pub trait RpcMiddleware: Clone + Send + Sync + 'static {
    /// The answer to one method call; by default `inner`'s.
    fn call<'a, S: RpcService>(
        &self,
        inner: &S,
        req: Request<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        inner.call(req)
    }

    /// Handles a notification (a call without an id, never answered); by default
    /// `inner` does.
    fn notification<'a, S: RpcService>(
        &self,
        inner: &S,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        inner.notification(n)
    }

    /// The answer to a batch of calls and notifications; by default `inner`'s.
    fn batch<'a, S: RpcService>(
        &self,
        inner: &S,
        batch: Batch<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        inner.batch(batch)
    }
}

/// `req` handed on to `inner`, its answer the middleware's.
pub fn pass<B, S: HttpService<B>>(inner: &mut S, req: HttpRequest<B>) -> BoxFuture {
    let fut = inner.call(req);
    Box::pin(async move { fut.await.map_err(Into::into) })
}

/// The middleware's own answer; the wrapped service is not called.
pub fn answer(resp: HttpResponse) -> BoxFuture {
    Box::pin(async move { Ok(resp) })
}

/// The wrapped service, made ready for this call, to call after an await (once a body is
/// in); a clone takes its place for the calls to come.
pub fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// The tower layer of a middleware `M`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Middleware<M>(pub(crate) M);

impl<M: Clone, S> Layer<S> for Middleware<M> {
    type Service = Wrapped<M, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Wrapped {
            inner,
            mw: self.0.clone(),
        }
    }
}

/// The service [`Middleware`] wraps around the rest of the stack.
#[derive(Debug, Clone)]
pub struct Wrapped<M, S> {
    inner: S,
    mw: M,
}

impl<M, S, B> Service<HttpRequest<B>> for Wrapped<M, S>
where
    M: HttpMiddleware<B>,
    S: HttpService<B>,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: HttpRequest<B>) -> Self::Future {
        self.mw.call(&mut self.inner, req)
    }
}

impl<M: RpcMiddleware, S: RpcService> RpcServiceT for Wrapped<M, S> {
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, req: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.mw.call(&self.inner, req)
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.mw.notification(&self.inner, n)
    }

    fn batch<'a>(&self, batch: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.mw.batch(&self.inner, batch)
    }
}
