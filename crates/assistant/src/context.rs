//! What the model is sent: the system prompt (the organization, the person, the page they are
//! on), the stored conversation turned back into provider turns, and the trimming that keeps a
//! long conversation inside the model's context window — oldest tool results emptied first,
//! then the oldest exchanges dropped — rather than failing.

use breeze_core::AiMessageRole;
use breeze_store::AiMessage;
use serde_json::Value;

use crate::provider::{Part, Speaker, Turn};

/// What a trimmed tool result says instead.
pub(crate) const TRIMMED: &str = "[tool result removed to fit the context window]";

/// What a tool call that has no stored result (the turn was cut off) answers.
const INTERRUPTED: &str = "[the call was interrupted before it answered]";

/// The most bytes of page context put into the prompt.
const MAX_PAGE_CONTEXT: usize = 2000;

/// Who and where, for the system prompt.
#[derive(Debug, Clone)]
pub struct PromptFacts<'a> {
    pub org_name: &'a str,
    pub user_name: &'a str,
    pub user_email: &'a str,
    pub page_context: Option<&'a Value>,
}

/// The system prompt.
pub(crate) fn system_prompt(f: &PromptFacts<'_>) -> String {
    let mut s = format!(
        "You are the assistant built into Breeze, a remote monitoring and management console. \
         You help {} <{}>, a technician of the organization \"{}\", by calling Breeze's tools. \
         Every tool runs with that person's permissions in that organization only. Calls that \
         change or run things on devices may need the person's approval; if a call is refused \
         or rejected, say so and continue without it. Be brief and concrete.",
        f.user_name, f.user_email, f.org_name
    );
    if let Some(ctx) = f.page_context {
        let mut text = ctx.to_string();
        if text.len() > MAX_PAGE_CONTEXT {
            let mut end = MAX_PAGE_CONTEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        s.push_str(&format!(
            "\n\nThe person is looking at this page of the console (JSON): {text}"
        ));
    }
    s
}

/// The stored messages as provider turns: a user message is a user turn; an assistant message
/// and the tool calls after it are one assistant turn; the tool results after that are one user
/// turn. A tool call without a stored result gets one saying it was interrupted, so the
/// conversation stays well-formed for the provider.
pub(crate) fn turns(messages: &[AiMessage]) -> Vec<Turn> {
    let mut turns: Vec<Turn> = Vec::new();
    let push = |turns: &mut Vec<Turn>, speaker: Speaker, part: Part, new_turn: bool| match turns
        .last_mut()
    {
        Some(t) if t.speaker == speaker && !new_turn => t.parts.push(part),
        _ => turns.push(Turn {
            speaker,
            parts: vec![part],
        }),
    };
    for m in messages {
        match m.role {
            AiMessageRole::User => push(
                &mut turns,
                Speaker::User,
                Part::Text(m.content.clone()),
                false,
            ),
            AiMessageRole::Assistant => {
                if m.content.is_empty() {
                    // A response of tool calls only: its calls open the turn.
                    turns.push(Turn {
                        speaker: Speaker::Assistant,
                        parts: Vec::new(),
                    });
                } else {
                    push(
                        &mut turns,
                        Speaker::Assistant,
                        Part::Text(m.content.clone()),
                        true,
                    );
                }
            }
            AiMessageRole::ToolUse => push(
                &mut turns,
                Speaker::Assistant,
                Part::ToolUse {
                    id: m.tool_use_id.clone().unwrap_or_default(),
                    name: m.tool_name.clone().unwrap_or_default(),
                    input: m
                        .payload
                        .clone()
                        .unwrap_or(Value::Object(Default::default())),
                },
                false,
            ),
            AiMessageRole::ToolResult => push(
                &mut turns,
                Speaker::User,
                Part::ToolResult {
                    id: m.tool_use_id.clone().unwrap_or_default(),
                    content: m.content.clone(),
                    is_error: m.is_error,
                },
                false,
            ),
            AiMessageRole::System => {}
        }
    }
    turns.retain(|t| !t.parts.is_empty());
    answer_every_call(&mut turns);
    turns
}

/// Adds an "interrupted" result for each tool call the next turn does not answer.
fn answer_every_call(turns: &mut Vec<Turn>) {
    let mut i = 0;
    while i < turns.len() {
        if turns[i].speaker == Speaker::Assistant {
            let calls: Vec<String> = turns[i]
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::ToolUse { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .collect();
            if !calls.is_empty() {
                if turns.get(i + 1).is_none_or(|t| t.speaker != Speaker::User) {
                    turns.insert(
                        i + 1,
                        Turn {
                            speaker: Speaker::User,
                            parts: Vec::new(),
                        },
                    );
                }
                let next = &mut turns[i + 1];
                for id in calls {
                    let answered = next
                        .parts
                        .iter()
                        .any(|p| matches!(p, Part::ToolResult { id: r, .. } if *r == id));
                    if !answered {
                        // Results come before any text in the turn, as the providers expect.
                        next.parts.insert(
                            0,
                            Part::ToolResult {
                                id,
                                content: INTERRUPTED.into(),
                                is_error: true,
                            },
                        );
                    }
                }
            }
        }
        i += 1;
    }
}

/// A rough token count (four bytes a token, plus a little per part): enough to stay under a
/// window with the margin the caller leaves.
fn estimate(turns: &[Turn]) -> usize {
    turns
        .iter()
        .flat_map(|t| &t.parts)
        .map(|p| {
            8 + match p {
                Part::Text(t) => t.len(),
                Part::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
                Part::ToolResult { content, .. } => content.len(),
            } / 4
        })
        .sum()
}

/// Trims `turns` to about `budget` tokens: the oldest tool results' contents first (never the
/// last turn's), then the oldest exchanges, whole, so every remaining tool call keeps its
/// result. The last turn (the person's question, or results the model is waiting for) stays.
pub(crate) fn trim(turns: &mut Vec<Turn>, budget: usize) {
    let last = turns.len().saturating_sub(1);
    'results: while estimate(turns) > budget {
        for t in turns.iter_mut().take(last) {
            for p in &mut t.parts {
                if let Part::ToolResult { content, .. } = p
                    && content != TRIMMED
                {
                    *content = TRIMMED.into();
                    continue 'results;
                }
            }
        }
        break;
    }
    while estimate(turns) > budget && turns.len() > 1 {
        turns.remove(0);
        // The conversation must start with a person's words, not an answer or a result.
        while turns.len() > 1
            && (turns[0].speaker != Speaker::User
                || turns[0]
                    .parts
                    .iter()
                    .any(|p| matches!(p, Part::ToolResult { .. })))
        {
            turns.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(t: &str) -> Turn {
        Turn {
            speaker: Speaker::User,
            parts: vec![Part::Text(t.into())],
        }
    }

    fn call(id: &str) -> Turn {
        Turn {
            speaker: Speaker::Assistant,
            parts: vec![Part::ToolUse {
                id: id.into(),
                name: "query_devices".into(),
                input: json!({}),
            }],
        }
    }

    fn result(id: &str, size: usize) -> Turn {
        Turn {
            speaker: Speaker::User,
            parts: vec![Part::ToolResult {
                id: id.into(),
                content: "x".repeat(size),
                is_error: false,
            }],
        }
    }

    #[test]
    fn oldest_tool_results_go_first_then_whole_exchanges() {
        let mut turns = vec![
            user("first"),
            call("a"),
            result("a", 4000),
            user("second"),
            call("b"),
            result("b", 4000),
        ];
        // Room for one big result: the older one is emptied, the last turn's kept.
        trim(&mut turns, 1200);
        assert!(
            matches!(&turns[2].parts[0], Part::ToolResult { content, .. } if content == TRIMMED)
        );
        assert!(
            matches!(&turns[5].parts[0], Part::ToolResult { content, .. } if content.len() == 4000)
        );
        // Less room still: exchanges go from the front, and what remains starts with words.
        trim(&mut turns, 1030);
        assert_eq!(turns.len(), 3, "{turns:?}");
        assert_eq!(turns[0], user("second"));
    }

    #[test]
    fn an_unanswered_call_gets_an_interrupted_result() {
        let mut turns = vec![user("q"), call("a")];
        answer_every_call(&mut turns);
        assert_eq!(turns.len(), 3);
        assert!(
            matches!(&turns[2].parts[0], Part::ToolResult { id, is_error: true, .. } if id == "a")
        );
    }
}
