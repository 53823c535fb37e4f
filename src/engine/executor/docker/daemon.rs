//! What the Docker executor and its network sandbox ask the daemon alike: an image pulled or
//! imported (its progress stream read to the end), a container removed, and the daemon's
//! errors said as one line.

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::query_parameters::{CreateImageOptionsBuilder, RemoveContainerOptionsBuilder};
use futures::StreamExt;

use crate::engine::typeref::ImageRef;

/// Why the daemon did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The Engine API refused, or could not be reached.
    #[error("{}", describe(.0))]
    Api(#[from] DockerError),
    /// A pull or an import reported an error in its progress stream.
    #[error("{0}")]
    Reported(String),
}

pub(super) async fn remove_container(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) | Err(DockerError::DockerResponseServerError { status_code: 404, .. }) => {}
        Err(e) => tracing::warn!(container = id, error = %describe(&e), "could not remove a container"),
    }
}

/// Pulls `image`, consuming the progress stream; returns the first error reported.
pub(super) async fn pull(docker: &Docker, image: &ImageRef) -> Result<(), DaemonError> {
    let repository = match &image.registry {
        Some(registry) => format!("{registry}/{}", image.repository),
        None => image.repository.clone(),
    };
    // An empty tag would pull every tag of the repository.
    let tag = image.digest.clone().or_else(|| image.tag.clone()).unwrap_or_else(|| "latest".into());
    let options = CreateImageOptionsBuilder::default().from_image(&repository).tag(&tag).build();
    image_progress(docker.create_image(Some(options), None, None)).await
}

/// Consumes the progress stream of a pull or import; returns the first error it reports.
pub(super) async fn image_progress(
    progress: impl futures::Stream<Item = Result<bollard::models::CreateImageInfo, DockerError>>,
) -> Result<(), DaemonError> {
    let mut progress = std::pin::pin!(progress);
    while let Some(item) = progress.next().await {
        match item {
            Ok(info) if info.error_detail.is_some() => {
                let detail = info.error_detail.and_then(|d| d.message).unwrap_or_default();
                return Err(DaemonError::Reported(detail));
            }
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A bollard error as one line: the daemon's own message when it gave one, else the error and
/// its causes.
pub(super) fn describe(error: &DockerError) -> String {
    if let DockerError::DockerResponseServerError { message, .. } = error {
        return message.trim().to_string();
    }
    let mut text = error.to_string();
    let mut next = std::error::Error::source(error);
    while let Some(cause) = next {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        next = cause.source();
    }
    text
}
