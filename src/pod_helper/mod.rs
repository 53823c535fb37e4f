//! What runs inside a resource type's Pod, in front of its program: the helper
//! (`deployster __pod-entry`, [`entry`]), its side of an invocation served by a warm runner
//! (`deployster __pod-serve`, [`serve`]), and the framed output both write ([`frames`]). No
//! Kubernetes client here: the helper is plain processes and files, built without the `kube`
//! feature; the client side that starts Pods and reads their logs is [`crate::pod`] (issue 51).

pub mod entry;
pub mod frames;
pub mod serve;
