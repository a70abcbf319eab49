//! rabbitmqctl's stop_app / start_app: whether this node's AMQP side runs. Stopping it
//! closes every client connection (320 CONNECTION_FORCED, the shutdown reason) and stops the
//! AMQP listeners, while the process, its definitions and messages, and the HTTP API stay;
//! starting it binds the listeners again. The API asks (`request`) and waits (`wait_for`);
//! the binary, which owns the listeners, watches `wanted` and reports back (`reached`).

use std::time::Duration;
use tokio::sync::watch;

/// What the operator asked for and what the listeners' owner has done; both start running.
pub struct AppSwitch {
    wanted: watch::Sender<bool>,
    actual: watch::Sender<bool>,
}

impl Default for AppSwitch {
    fn default() -> Self {
        AppSwitch {
            wanted: watch::Sender::new(true),
            actual: watch::Sender::new(true),
        }
    }
}

impl AppSwitch {
    /// Asks for the AMQP side to run (`true`, start_app) or stop (`false`, stop_app).
    pub fn request(&self, running: bool) {
        self.wanted.send_replace(running);
    }

    /// Waits until the listeners' owner has brought the AMQP side to `running`; false when
    /// it has not within `timeout` (a broker without such an owner, as in tests that serve a
    /// listener of their own, never does).
    pub async fn wait_for(&self, running: bool, timeout: Duration) -> bool {
        let mut actual = self.actual.subscribe();
        tokio::time::timeout(timeout, actual.wait_for(|now| *now == running))
            .await
            .is_ok_and(|reached| reached.is_ok())
    }

    /// What the operator asks for, for the listeners' owner to watch.
    pub fn wanted(&self) -> watch::Receiver<bool> {
        self.wanted.subscribe()
    }

    /// The listeners' owner reports that the AMQP side now runs (or has stopped).
    pub fn reached(&self, running: bool) {
        self.actual.send_replace(running);
    }

    /// Whether the AMQP side runs now (the node's `running` in the API).
    pub fn is_running(&self) -> bool {
        *self.actual.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_is_answered_once_the_owner_reaches_it() {
        let switch = std::sync::Arc::new(AppSwitch::default());
        let mut wanted = switch.wanted();
        assert!(switch.is_running());
        switch.request(false);
        assert!(!switch.wait_for(false, Duration::from_millis(20)).await);
        let owner = switch.clone();
        tokio::spawn(async move {
            let _ = wanted.wait_for(|running| !*running).await;
            owner.reached(false);
        });
        assert!(switch.wait_for(false, Duration::from_secs(5)).await);
        assert!(!switch.is_running());
    }
}
