//! `AmqpError`: every refusal the broker core can make, with the reply code and text RabbitMQ
//! would send. Whether it closes a channel or the connection follows from the code's class.

use warren_codec::ReplyCode;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpError {
    pub code: ReplyCode,
    /// The text after the code name, e.g. "no queue 'q' in vhost '/'".
    pub text: String,
}

impl AmqpError {
    pub fn new(code: ReplyCode, text: impl Into<String>) -> AmqpError {
        AmqpError {
            code,
            text: text.into(),
        }
    }

    pub fn not_found(text: impl Into<String>) -> AmqpError {
        AmqpError::new(ReplyCode::NotFound, text)
    }

    pub fn precondition(text: impl Into<String>) -> AmqpError {
        AmqpError::new(ReplyCode::PreconditionFailed, text)
    }

    pub fn access_refused(text: impl Into<String>) -> AmqpError {
        AmqpError::new(ReplyCode::AccessRefused, text)
    }

    pub fn resource_locked(text: impl Into<String>) -> AmqpError {
        AmqpError::new(ReplyCode::ResourceLocked, text)
    }

    pub fn is_connection_error(&self) -> bool {
        self.code.is_hard_error()
    }

    /// The reply text as RabbitMQ formats it: `NOT_FOUND - no queue 'q' in vhost '/'`. It
    /// goes out as a shortstr: over 255 bytes it is cut to 252 (on a character boundary) and
    /// ends in "...", as RabbitMQ cuts it.
    pub fn reply_text(&self) -> String {
        let mut text = format!("{} - {}", self.code.name(), self.text);
        if text.len() > 255 {
            let mut cut = 252;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("...");
        }
        text
    }
}

impl std::fmt::Display for AmqpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reply_text())
    }
}

impl std::error::Error for AmqpError {}

pub type AmqpResult<T> = Result<T, AmqpError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_reply_texts_are_cut_as_rabbitmq_cuts_them() {
        let e = AmqpError::resource_locked("é".repeat(200));
        let text = e.reply_text();
        assert!(text.len() <= 255 && text.ends_with("..."), "{}", text.len());
        assert_eq!(AmqpError::not_found("q").reply_text(), "NOT_FOUND - q");
    }
}
