//! Messages a program prints on stdout for Deployster (seed 004), found while it runs:
//!
//! ```text
//! [AGENT_MESSAGE] 50.0 [AGENT_MESSAGE_END]        progress, in percent
//! [AGENT_MESSAGE] +1.0                            an increment; one line needs no end marker
//! [AGENT_MESSAGE]
//! {"progress": 100, "result": [{"key": "url", "value": "http://…"}], "error": 3, "errorMsg": "…",}
//! [AGENT_MESSAGE_END]                             a JSON body over several lines
//! ```
//!
//! A message is at most 8 KiB; only ASCII is read (other characters are skipped); the seed's
//! trailing comma before `}` is tolerated. Every other line is the program's output.

/// What a message says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub progress: Option<Percent>,
    /// `result` pairs, in order.
    pub results: Vec<(String, String)>,
    /// `errorMsg` (with `error`, the code, in front when given).
    pub error: Option<String>,
}

/// Progress as reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Percent {
    /// Percent done.
    At(f64),
    /// Percent more.
    Plus(f64),
}

/// One line of stdout, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// Output, to show.
    Text(String),
    /// A message, complete.
    Message(Message),
    /// Inside a multi-line message: nothing yet.
    Pending,
    /// A message that breaks the format, and why; the program's own fault.
    Invalid(String),
}

const START: &str = "[AGENT_MESSAGE]";
const END: &str = "[AGENT_MESSAGE_END]";
/// The most a message may hold.
pub const MESSAGE_LIMIT: usize = 8 * 1024;

/// Reads stdout line by line.
#[derive(Debug, Default)]
pub struct Reader {
    /// The body of a multi-line message being read.
    open: Option<String>,
}

impl Reader {
    pub fn line(&mut self, raw: &str) -> Line {
        let line: String = raw.chars().filter(char::is_ascii).collect();
        if let Some(body) = &mut self.open {
            if let Some(before) = line.trim_end().strip_suffix(END) {
                body.push_str(before);
                let body = self.open.take().unwrap_or_default();
                return parse(&body);
            }
            body.push_str(&line);
            body.push('\n');
            if body.len() > MESSAGE_LIMIT {
                self.open = None;
                return Line::Invalid(format!("a message longer than {MESSAGE_LIMIT} bytes"));
            }
            return Line::Pending;
        }
        let Some(rest) = line.trim_start().strip_prefix(START) else { return Line::Text(raw.to_string()) };
        match rest.trim_end().strip_suffix(END) {
            Some(body) => parse(body),
            None if rest.trim().is_empty() || rest.trim_start().starts_with('{') && !rest.trim_end().ends_with('}') => {
                self.open = Some(format!("{rest}\n"));
                Line::Pending
            }
            // One line: the end marker may be left out.
            None => parse(rest),
        }
    }

    /// At the end of output: a message still open was never ended.
    pub fn finish(&mut self) -> Option<Line> {
        self.open.take().map(|_| Line::Invalid(format!("a message without {END}")))
    }
}

fn parse(body: &str) -> Line {
    let body = body.trim();
    if body.len() > MESSAGE_LIMIT {
        return Line::Invalid(format!("a message longer than {MESSAGE_LIMIT} bytes"));
    }
    let number = |text: &str| text.parse::<f64>().ok().filter(|n| n.is_finite());
    if let Some(n) = body.strip_prefix('+').and_then(number) {
        return Line::Message(Message { progress: Some(Percent::Plus(n)), ..Message::default() });
    }
    if let Some(n) = number(body) {
        return Line::Message(Message { progress: Some(Percent::At(n)), ..Message::default() });
    }
    // The seed's examples end their objects with a comma.
    let tolerant = body.replace(",\n}", "\n}").replace(",}", "}").replace(", }", " }");
    let value: serde_json::Value = match serde_json::from_str(&tolerant) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        _ => return Line::Invalid("a message that is neither a number nor a JSON object".into()),
    };
    let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let results = value["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((text(r.get("key")?), text(r.get("value")?))))
        .collect();
    let error = match (value.get("error"), value.get("errorMsg")) {
        (Some(code), Some(message)) => Some(format!("{} (error {})", text(message), text(code))),
        (None, Some(message)) => Some(text(message)),
        (Some(code), None) => Some(format!("error {}", text(code))),
        (None, None) => None,
    };
    Line::Message(Message { progress: value["progress"].as_f64().map(Percent::At), results, error })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(lines: &[&str]) -> Vec<Line> {
        let mut reader = Reader::default();
        let mut out: Vec<Line> = lines.iter().map(|l| reader.line(l)).filter(|l| *l != Line::Pending).collect();
        out.extend(reader.finish());
        out
    }

    #[test]
    fn every_form_the_seed_gives() {
        assert_eq!(
            read(&["[AGENT_MESSAGE] 50.0 [AGENT_MESSAGE_END]"]),
            [Line::Message(Message { progress: Some(Percent::At(50.0)), ..Default::default() })]
        );
        assert_eq!(
            read(&["[AGENT_MESSAGE] +1.0"]),
            [Line::Message(Message { progress: Some(Percent::Plus(1.0)), ..Default::default() })]
        );
        let multi = read(&[
            "[AGENT_MESSAGE] ",
            "{",
            "    \"progress\": 100,",
            "    \"result\":[",
            "      {\"key\": \"url\", \"value\": \"http://x\"}",
            "    ],",
            "}",
            "[AGENT_MESSAGE_END]",
        ]);
        assert_eq!(
            multi,
            [Line::Message(Message {
                progress: Some(Percent::At(100.0)),
                results: vec![("url".into(), "http://x".into())],
                error: None
            })]
        );
        let error = read(&["[AGENT_MESSAGE] {\"error\": 42, \"errorMsg\": \"disk full\"} [AGENT_MESSAGE_END]"]);
        assert_eq!(
            error,
            [Line::Message(Message { error: Some("disk full (error 42)".into()), ..Default::default() })]
        );
        assert_eq!(
            read(&["plain output", "  indented"]),
            [Line::Text("plain output".into()), Line::Text("  indented".into())]
        );
        assert_eq!(read(&["[AGENT_MESSAGE] 7.5 [AGENT_MESSAGE_END]é"]).len(), 1, "non-ASCII is skipped");
    }

    #[test]
    fn broken_messages_are_said_so() {
        assert_eq!(
            read(&["[AGENT_MESSAGE] not json [AGENT_MESSAGE_END]"]),
            [Line::Invalid("a message that is neither a number nor a JSON object".into())]
        );
        assert_eq!(
            read(&["[AGENT_MESSAGE]", "{\"progress\": 3"]),
            [Line::Invalid("a message without [AGENT_MESSAGE_END]".into())]
        );
        let long = format!("\"{}\"", "x".repeat(MESSAGE_LIMIT));
        let lines = ["[AGENT_MESSAGE]", "{\"errorMsg\":", long.as_str(), "}", "[AGENT_MESSAGE_END]"];
        assert_eq!(read(&lines)[0], Line::Invalid(format!("a message longer than {MESSAGE_LIMIT} bytes")));
    }
}
