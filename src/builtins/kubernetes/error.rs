//! Why a `builtin/kubernetes` call failed, each cause with its reason.

/// Why a call failed. Its text is what the call says on stderr; its [`reason`](Self::reason)
/// names the kind of cause for conditions, events and metrics.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ObjectError {
    /// The request or its config cannot be used as it is.
    #[error("{0}")]
    Config(String),
    /// The server knows no such kind.
    #[error("{0}")]
    UnknownKind(String),
    /// There is no client to act with.
    #[error("{0}")]
    Client(String),
    /// The object exists and is not this resource's.
    #[error("{0}")]
    NotOurs(String),
    /// The API server refused a request (with its status code) or could not be asked.
    #[error("{message}")]
    Api { code: Option<u16>, message: String },
    /// The object is not ready and will not be, was not in time, or is gone.
    #[error("{0}")]
    NotReady(String),
    /// A value of another type than its field's, not convertible exactly.
    #[error("{0}")]
    ValueType(String),
    #[error("unknown action `{0}`")]
    UnknownAction(String),
}

impl ObjectError {
    pub fn reason(&self) -> &'static str {
        match self {
            ObjectError::Config(_) => "InvalidConfig",
            ObjectError::UnknownKind(_) => "UnknownKind",
            ObjectError::Client(_) => "NoClient",
            ObjectError::NotOurs(_) => "NotOwned",
            ObjectError::Api { code: Some(403), .. } => "Forbidden",
            ObjectError::Api { code: Some(409), .. } => "Conflict",
            ObjectError::Api { code: Some(422), .. } => "Invalid",
            ObjectError::Api { code: Some(_), .. } => "ApiError",
            ObjectError::Api { code: None, .. } => "ApiUnreachable",
            ObjectError::NotReady(_) => "NotReady",
            ObjectError::ValueType(_) => "ValueTypeMismatch",
            ObjectError::UnknownAction(_) => "UnknownAction",
        }
    }
}

/// The status code of the API server's answer, when it answered.
pub(super) fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}
