//! The AI assistant's vocabulary: where a chat session is, who wrote a message, where a tool
//! call made in chat is, and what tokens cost. Pure: the store keeps these, `breeze-assistant`
//! drives them.

use std::collections::BTreeMap;

use crate::string_enum;

string_enum! {
    /// Where a chat session is. Closed and expired sessions keep their history but take no
    /// new message.
    pub enum AiSessionStatus: "AI session status" {
        Active = "active",
        /// Closed by its owner.
        Closed = "closed",
        /// Idle past the configured time.
        Expired = "expired",
    }
}

string_enum! {
    /// Who wrote a message of a chat.
    pub enum AiMessageRole: "AI message role" {
        User = "user",
        Assistant = "assistant",
        System = "system",
        /// The model asked for a tool call (its input in the message's payload).
        ToolUse = "tool_use",
        /// What the tool call answered, as handed back to the model.
        ToolResult = "tool_result",
    }
}

string_enum! {
    /// Where a tool call made in chat is. A Tier 3 call is `pending` while its approval request
    /// waits for a person.
    pub enum AiToolStatus: "AI tool status" {
        Pending = "pending",
        Approved = "approved",
        Executing = "executing",
        Completed = "completed",
        Failed = "failed",
        /// Denied, expired or withdrawn before it ran.
        Rejected = "rejected",
    }
}

impl AiToolStatus {
    /// Whether nothing more will happen to the call.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            AiToolStatus::Completed | AiToolStatus::Failed | AiToolStatus::Rejected
        )
    }
}

/// A model's price, in cents per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelPrice {
    pub input_cents_per_mtok: i64,
    pub output_cents_per_mtok: i64,
}

/// The price of each known model. A model not listed has an unknown cost: recorded as unknown,
/// never as zero, so a budget is never fooled by a model nobody priced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pricing {
    models: BTreeMap<String, ModelPrice>,
}

impl Default for Pricing {
    /// The published list prices of the models Breeze suggests.
    fn default() -> Self {
        let mut models = BTreeMap::new();
        for (name, input, output) in [
            ("claude-sonnet-4-5-20250929", 300, 1500),
            ("claude-haiku-4-5-20251001", 100, 500),
        ] {
            models.insert(
                name.to_owned(),
                ModelPrice {
                    input_cents_per_mtok: input,
                    output_cents_per_mtok: output,
                },
            );
        }
        Self { models }
    }
}

impl Pricing {
    /// The defaults with `overrides` (`model=input/output`, comma-separated, in cents per million
    /// tokens) laid over them: how the setting reads.
    pub fn with_overrides(overrides: &str) -> Result<Self, crate::ParseError> {
        let mut pricing = Self::default();
        for entry in overrides
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let bad = || crate::ParseError {
                what: "model price",
                value: entry.to_owned(),
                expected: "model=INPUT/OUTPUT in cents per million tokens",
            };
            let (model, prices) = entry.split_once('=').ok_or_else(bad)?;
            let (input, output) = prices.split_once('/').ok_or_else(bad)?;
            let parse = |s: &str| s.trim().parse::<i64>().ok().filter(|n| *n >= 0);
            let (Some(input), Some(output)) = (parse(input), parse(output)) else {
                return Err(bad());
            };
            if model.trim().is_empty() {
                return Err(bad());
            }
            pricing.models.insert(
                model.trim().to_owned(),
                ModelPrice {
                    input_cents_per_mtok: input,
                    output_cents_per_mtok: output,
                },
            );
        }
        Ok(pricing)
    }

    /// The price of `model`, if known.
    pub fn price(&self, model: &str) -> Option<ModelPrice> {
        self.models.get(model).copied()
    }

    /// What `input` and `output` tokens of `model` cost, in millionths of a cent (exact:
    /// tokens × cents per million tokens); `None` for a model whose price is unknown.
    pub fn cost_micro_cents(&self, model: &str, input: u64, output: u64) -> Option<i64> {
        let p = self.price(model)?;
        let input = i64::try_from(input).ok()?;
        let output = i64::try_from(output).ok()?;
        input
            .checked_mul(p.input_cents_per_mtok)?
            .checked_add(output.checked_mul(p.output_cents_per_mtok)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_cost_exactly_and_unknown_ones_are_unknown() {
        let p = Pricing::default();
        // 1M input + 1M output tokens of Sonnet: $3 + $15 = 1800 cents.
        assert_eq!(
            p.cost_micro_cents("claude-sonnet-4-5-20250929", 1_000_000, 1_000_000),
            Some(1800 * 1_000_000)
        );
        assert_eq!(
            p.cost_micro_cents("claude-haiku-4-5-20251001", 10, 20),
            Some(10 * 100 + 20 * 500)
        );
        assert_eq!(p.cost_micro_cents("llama3", 10, 20), None);
    }

    #[test]
    fn overrides_lay_over_the_defaults_and_bad_ones_name_themselves() {
        let p = Pricing::with_overrides("llama3=0/0, claude-haiku-4-5-20251001=80/400").unwrap();
        assert_eq!(p.cost_micro_cents("llama3", 5, 5), Some(0));
        assert_eq!(
            p.price("claude-haiku-4-5-20251001")
                .unwrap()
                .output_cents_per_mtok,
            400
        );
        assert!(p.price("claude-sonnet-4-5-20250929").is_some());
        for bad in ["x", "x=1", "x=a/2", "=1/2", "x=-1/2"] {
            let e = Pricing::with_overrides(bad).unwrap_err();
            assert_eq!(e.value, bad, "{e}");
        }
    }
}
