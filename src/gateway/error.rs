//! The REST API's errors: E2B's `Error` body (`{"code": STATUS, "message": "..."}`) with
//! the status the SDK maps to its own exceptions (401 AuthenticationException, 404
//! NotFoundException / SandboxNotFoundException, 400 InvalidArgument, others
//! SandboxException with the message).

use super::backend::{BackendError, Failure};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// A request the gateway cannot take as it is: the message names the field and the fix.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// The sandbox does not exist, or is another tenant's (the same answer, so that a
    /// tenant learns nothing of another's sandboxes).
    pub fn no_sandbox(id: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, format!("sandbox {id:?} not found"))
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> ApiError {
        let status = match err.failure {
            Failure::NotFound | Failure::Gone => StatusCode::NOT_FOUND,
            Failure::BadInput => StatusCode::BAD_REQUEST,
            Failure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Failure::Server => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, err.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.status.as_u16(), "message": self.message});
        (self.status, axum::Json(body)).into_response()
    }
}
