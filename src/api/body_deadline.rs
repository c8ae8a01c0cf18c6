//! A deadline on the request body: a client that sends its body too slowly (one byte a second,
//! or a `content-length` it never fills) gets 408 instead of holding a worker's buffer open.
//! actix bounds the request head itself (`client_request_timeout`); nothing bounds the body.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage, web};
use bytes::Bytes;
use futures_util::Stream;
use tokio::time::{Sleep, sleep};

/// How long a request's body may take to arrive, counted from when its head is in.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub Duration);

/// Middleware: bounds the payload of every request by the app's [`BodyTimeout`].
pub async fn body_deadline(
    mut req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    if let Some(timeout) = req.app_data::<web::Data<BodyTimeout>>().map(|t| t.0) {
        let inner = req.take_payload();
        let bounded = DeadlinePayload {
            inner,
            deadline: Box::pin(sleep(timeout)),
            expired: false,
        };
        req.set_payload(Payload::Stream {
            payload: Box::pin(bounded),
        });
    }
    next.call(req).await
}

/// The request's payload, failing with `TimedOut` once the deadline passes.
struct DeadlinePayload {
    inner: Payload,
    deadline: Pin<Box<Sleep>>,
    expired: bool,
}

impl Stream for DeadlinePayload {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(next) = Pin::new(&mut self.inner).poll_next(cx) {
            return Poll::Ready(next);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired = true;
            let error = io::Error::new(io::ErrorKind::TimedOut, "the request body did not arrive in time");
            return Poll::Ready(Some(Err(PayloadError::Io(error))));
        }
        Poll::Pending
    }
}

/// Whether a payload error is this deadline's.
pub fn is_body_timeout(error: &PayloadError) -> bool {
    matches!(error, PayloadError::Io(e) if e.kind() == io::ErrorKind::TimedOut)
}
