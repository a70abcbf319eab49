mod oneshot_responder;
mod progress_responder;

pub use oneshot_responder::OneshotResponder;
pub use progress_responder::ProgressResponder;
