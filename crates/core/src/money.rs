//! Money as accountants expect it: integers in minor units, an ISO 4217 currency on every
//! amount, no floating point anywhere, and one rounding rule.
//!
//! - An amount is a [`Money`]: an `i64` count of the currency's minor unit (cents for USD,
//!   yen for JPY, fils for KWD) and its [`Currency`]. Adding amounts of two currencies is an
//!   error, never a conversion.
//! - Text is parsed exactly ([`Money::parse`], [`Quantity::parse`]): `"12.30"` is 1230 cents;
//!   more decimals than the currency has (`"12.345"` USD), exponents, signs in odd places and
//!   anything a float would have accepted (`"1e3"`, `"NaN"`) are refused rather than rounded.
//! - Quantities are thousandths ([`Quantity`]): `1.5` hours or `0.25` of a licence are exact.
//!
//! **The rounding rule.** Each line is rounded once, to the currency's minor unit, **half away
//! from zero** (`0.5` cent → `1` cent, `-0.5` → `-1`): `quantity × unit price`
//! ([`line_amount`]), `minutes × hourly rate / 60` ([`time_amount`]). A line's tax is computed
//! from its rounded amount and rounded the same way ([`tax_amount`]). Totals are the exact sums
//! of rounded lines and rounded taxes ([`Totals::of`]), so the lines printed on an invoice
//! always add up to its printed total. Intermediate products are `i128`, so nothing overflows
//! before the final range check.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What is wrong with an amount or a calculation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// Not an ISO 4217 code Breeze knows the minor unit of.
    #[error("unknown currency {0:?} (an ISO 4217 code such as USD, EUR, GBP, JPY)")]
    UnknownCurrency(String),
    /// Two currencies met in one sum.
    #[error("currencies differ: {0} and {1}")]
    CurrencyMismatch(Currency, Currency),
    /// Text that is not an exact decimal amount in the currency.
    #[error("{0}")]
    Invalid(String),
    /// The result does not fit.
    #[error("amount out of range")]
    Overflow,
}

/// ISO 4217 codes with their minor-unit exponents. Only these are accepted: an amount in a
/// currency whose exponent is unknown cannot be stored in minor units correctly.
const CURRENCIES: &[(&str, u32)] = &[
    ("AUD", 2),
    ("BHD", 3),
    ("BRL", 2),
    ("CAD", 2),
    ("CHF", 2),
    ("CLP", 0),
    ("CNY", 2),
    ("CZK", 2),
    ("DKK", 2),
    ("EUR", 2),
    ("GBP", 2),
    ("HKD", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("ISK", 0),
    ("JOD", 3),
    ("JPY", 0),
    ("KRW", 0),
    ("KWD", 3),
    ("MXN", 2),
    ("MYR", 2),
    ("NOK", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PHP", 2),
    ("PLN", 2),
    ("RON", 2),
    ("SAR", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("THB", 2),
    ("TND", 3),
    ("TRY", 2),
    ("TWD", 2),
    ("USD", 2),
    ("ZAR", 2),
];

/// An ISO 4217 currency Breeze knows the minor unit of.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    code: [u8; 3],
    exponent: u8,
}

impl Currency {
    /// The currency with this code (upper case, as ISO 4217 writes it).
    pub fn parse(code: &str) -> Result<Self, MoneyError> {
        CURRENCIES
            .iter()
            .find(|(c, _)| *c == code)
            .and_then(|(c, e)| {
                let b = c.as_bytes();
                Some(Currency {
                    code: [b[0], b[1], b[2]],
                    exponent: u8::try_from(*e).ok()?,
                })
            })
            .ok_or_else(|| MoneyError::UnknownCurrency(code.chars().take(16).collect()))
    }

    /// The three-letter code.
    pub fn code(&self) -> &str {
        // Built only from the ASCII table above.
        std::str::from_utf8(&self.code).unwrap_or("???")
    }

    /// How many decimal places the minor unit has (2 for USD, 0 for JPY, 3 for KWD).
    pub fn exponent(self) -> u32 {
        u32::from(self.exponent)
    }

    /// Every accepted code, for schemas and messages.
    pub fn codes() -> impl Iterator<Item = &'static str> {
        CURRENCIES.iter().map(|(c, _)| *c)
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Currency::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<String> for Currency {
    type Error = MoneyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Currency::parse(&s)
    }
}

/// An amount: a whole number of the currency's minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Money {
    /// Minor units (cents for USD).
    pub minor: i64,
    pub currency: Currency,
}

impl Money {
    pub const fn new(minor: i64, currency: Currency) -> Self {
        Self { minor, currency }
    }

    pub const fn zero(currency: Currency) -> Self {
        Self::new(0, currency)
    }

    /// An exact decimal amount in `currency`: `"12.3"` and `"12.30"` are 1230 cents; an
    /// optional leading `-`; no more decimals than the currency has, no exponent, no spaces,
    /// no thousands separators.
    pub fn parse(text: &str, currency: Currency) -> Result<Self, MoneyError> {
        let minor = parse_scaled(text, currency.exponent(), "amount")?;
        Ok(Self::new(minor, currency))
    }

    /// The sum, refusing another currency and overflow.
    pub fn checked_add(self, other: Money) -> Result<Money, MoneyError> {
        self.same_currency(other)?;
        self.minor
            .checked_add(other.minor)
            .map(|m| Money::new(m, self.currency))
            .ok_or(MoneyError::Overflow)
    }

    /// The difference, refusing another currency and overflow.
    pub fn checked_sub(self, other: Money) -> Result<Money, MoneyError> {
        self.same_currency(other)?;
        self.minor
            .checked_sub(other.minor)
            .map(|m| Money::new(m, self.currency))
            .ok_or(MoneyError::Overflow)
    }

    fn same_currency(self, other: Money) -> Result<(), MoneyError> {
        if self.currency == other.currency {
            Ok(())
        } else {
            Err(MoneyError::CurrencyMismatch(self.currency, other.currency))
        }
    }

    /// The amount as a decimal string without the currency (`"-12.30"`, `"1500"` for JPY).
    pub fn decimal(&self) -> String {
        format_scaled(self.minor, self.currency.exponent())
    }
}

/// `12.30 USD`.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.decimal(), self.currency)
    }
}

/// A quantity in thousandths: `1.5` hours is 1500, one licence is 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Quantity(pub i64);

impl Quantity {
    /// One unit.
    pub const ONE: Quantity = Quantity(1000);

    /// An exact decimal quantity with at most three decimals (`"1.5"`, `"0.250"`, `"3"`).
    pub fn parse(text: &str) -> Result<Self, MoneyError> {
        parse_scaled(text, 3, "quantity").map(Quantity)
    }

    /// Whole units, for a count.
    pub fn units(n: i64) -> Result<Self, MoneyError> {
        n.checked_mul(1000)
            .map(Quantity)
            .ok_or(MoneyError::Overflow)
    }

    /// `"1.5"`, `"3"`.
    pub fn decimal(&self) -> String {
        let s = format_scaled(self.0, 3);
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    }
}

/// `n / d` rounded half away from zero; `d` is positive.
fn round_half_away(n: i128, d: i128) -> i128 {
    let q = n / d;
    let r = n % d;
    // |r| * 2 >= d means the remainder is at least a half: move away from zero.
    if r.abs() * 2 >= d { q + n.signum() } else { q }
}

fn to_minor(v: i128) -> Result<i64, MoneyError> {
    i64::try_from(v).map_err(|_| MoneyError::Overflow)
}

/// `quantity × unit price`, rounded once to the minor unit, half away from zero.
pub fn line_amount(quantity: Quantity, unit_price: Money) -> Result<Money, MoneyError> {
    let exact = i128::from(quantity.0) * i128::from(unit_price.minor);
    Ok(Money::new(
        to_minor(round_half_away(exact, 1000))?,
        unit_price.currency,
    ))
}

/// `minutes × hourly rate / 60`, rounded once to the minor unit, half away from zero.
pub fn time_amount(minutes: i64, hourly_rate: Money) -> Result<Money, MoneyError> {
    let exact = i128::from(minutes) * i128::from(hourly_rate.minor);
    Ok(Money::new(
        to_minor(round_half_away(exact, 60))?,
        hourly_rate.currency,
    ))
}

/// The tax on a rounded line amount at `rate_bp` basis points (`2000` = 20 %), rounded half
/// away from zero.
pub fn tax_amount(amount: Money, rate_bp: u32) -> Result<Money, MoneyError> {
    let exact = i128::from(amount.minor) * i128::from(rate_bp);
    Ok(Money::new(
        to_minor(round_half_away(exact, 10_000))?,
        amount.currency,
    ))
}

/// A document's totals: the sums of its rounded lines and of their rounded taxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub subtotal: Money,
    pub tax: Money,
    pub total: Money,
}

impl Totals {
    /// Totals in `currency` of `(amount, tax)` pairs; a pair in another currency is refused.
    pub fn of(
        currency: Currency,
        lines: impl IntoIterator<Item = (Money, Money)>,
    ) -> Result<Totals, MoneyError> {
        let (mut subtotal, mut tax) = (Money::zero(currency), Money::zero(currency));
        for (amount, line_tax) in lines {
            subtotal = subtotal.checked_add(amount)?;
            tax = tax.checked_add(line_tax)?;
        }
        Ok(Totals {
            subtotal,
            tax,
            total: subtotal.checked_add(tax)?,
        })
    }
}

/// Parses an exact decimal with at most `scale` fraction digits into an integer scaled by
/// `10^scale`.
fn parse_scaled(text: &str, scale: u32, what: &str) -> Result<i64, MoneyError> {
    let bad = || {
        MoneyError::Invalid(format!(
            "{what} {:?} is not a decimal with at most {scale} decimal places",
            text.chars().take(40).collect::<String>()
        ))
    };
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match digits.split_once('.') {
        Some((w, f)) => (w, f),
        None => (digits, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || (digits.contains('.') && fraction.is_empty())
        || fraction.len() > scale as usize
        || whole.len() > 20
    {
        return Err(bad());
    }
    let mut value: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        value = value * 10 + i128::from(b - b'0');
    }
    // Pad the fraction to the scale: "12.3" at scale 2 is 1230.
    for _ in fraction.len()..scale as usize {
        value *= 10;
    }
    if negative {
        value = -value;
    }
    i64::try_from(value).map_err(|_| MoneyError::Overflow)
}

fn format_scaled(v: i64, scale: u32) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let abs = v.unsigned_abs();
    if scale == 0 {
        return format!("{sign}{abs}");
    }
    let unit = 10u64.pow(scale);
    format!(
        "{sign}{}.{:0width$}",
        abs / unit,
        abs % unit,
        width = scale as usize
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use proptest::prelude::*;

    use super::*;

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    #[test]
    fn amounts_parse_exactly_or_not_at_all() {
        let (usd, jpy, kwd) = (
            usd(),
            Currency::parse("JPY").unwrap(),
            Currency::parse("KWD").unwrap(),
        );
        assert_eq!(Money::parse("12.3", usd).unwrap().minor, 1230);
        assert_eq!(Money::parse("12.30", usd).unwrap().minor, 1230);
        assert_eq!(Money::parse("-0.01", usd).unwrap().minor, -1);
        assert_eq!(Money::parse("1500", jpy).unwrap().minor, 1500);
        assert_eq!(Money::parse("1.234", kwd).unwrap().minor, 1234);
        for bad in [
            "12.345", "1e3", "NaN", "inf", "", "-", ".5", "5.", "1,000", " 1", "+1", "--1", "0x10",
            "1.2.3", "١٢",
        ] {
            assert!(Money::parse(bad, usd).is_err(), "{bad:?} was accepted");
        }
        assert!(Money::parse("1.5", jpy).is_err(), "yen have no decimals");
        assert_eq!(
            Money::parse("99999999999999999.99", usd),
            Err(MoneyError::Overflow)
        );
        assert!(Currency::parse("usd").is_err() && Currency::parse("XXX").is_err());
        assert_eq!(Money::new(-1230, usd).to_string(), "-12.30 USD");
        assert_eq!(Money::new(5, kwd).decimal(), "0.005");
        assert_eq!(Money::new(1500, jpy).decimal(), "1500");
        assert_eq!(Quantity::parse("1.5").unwrap(), Quantity(1500));
        assert_eq!(Quantity(1500).decimal(), "1.5");
        assert_eq!(Quantity(3000).decimal(), "3");
        assert!(Quantity::parse("0.0001").is_err());
    }

    #[test]
    fn rounding_is_half_away_from_zero_once_per_line() {
        let usd = usd();
        // 0.5 of a cent rounds away from zero, both ways.
        assert_eq!(
            line_amount(Quantity(500), Money::new(1, usd))
                .unwrap()
                .minor,
            1
        );
        assert_eq!(
            line_amount(Quantity(500), Money::new(-1, usd))
                .unwrap()
                .minor,
            -1
        );
        // Just under a half rounds toward zero.
        assert_eq!(
            line_amount(Quantity(499), Money::new(1, usd))
                .unwrap()
                .minor,
            0
        );
        // 1.5 h at 100.00/h.
        assert_eq!(
            line_amount(Quantity(1500), Money::new(10_000, usd))
                .unwrap()
                .minor,
            15_000
        );
        // 20 minutes at 100.00/h = 33.333… → 33.33; 10 min at 0.03/h = 0.005 → 0.01.
        assert_eq!(
            time_amount(20, Money::new(10_000, usd)).unwrap().minor,
            3333
        );
        assert_eq!(time_amount(10, Money::new(3, usd)).unwrap().minor, 1);
        // 8.25 % of 10.10 = 0.833… → 0.83; 20 % of 0.025 is not reachable (lines are whole
        // cents), so tax of a rounded 0.03 at 50 % = 0.015 → 0.02.
        assert_eq!(tax_amount(Money::new(1010, usd), 825).unwrap().minor, 83);
        assert_eq!(tax_amount(Money::new(3, usd), 5000).unwrap().minor, 2);
        // Rounding per line, not on the total: three lines of 1/3 of a cent-priced unit.
        let third = line_amount(Quantity(333), Money::new(1, usd)).unwrap();
        let t = Totals::of(usd, [(third, Money::zero(usd)); 3]).unwrap();
        assert_eq!(t.total.minor, 0);
        assert_eq!(
            line_amount(Quantity(i64::MAX), Money::new(i64::MAX, usd)),
            Err(MoneyError::Overflow)
        );
    }

    #[test]
    fn currencies_never_mix() {
        let (usd, eur) = (usd(), Currency::parse("EUR").unwrap());
        assert_eq!(
            Money::new(1, usd).checked_add(Money::new(1, eur)),
            Err(MoneyError::CurrencyMismatch(usd, eur))
        );
        assert!(Totals::of(usd, [(Money::new(1, eur), Money::zero(eur))]).is_err());
        assert!(Totals::of(usd, [(Money::new(1, usd), Money::zero(eur))]).is_err());
    }

    fn currency() -> impl Strategy<Value = Currency> {
        prop::sample::select(CURRENCIES.iter().map(|(c, _)| *c).collect::<Vec<_>>())
            .prop_map(|c| Currency::parse(c).unwrap())
    }

    proptest! {
        /// For random lines: the total is the sum of the rounded lines plus the sum of their
        /// rounded taxes, each line is within half a minor unit of its exact value, and any
        /// line of another currency makes the whole sum an error rather than a number.
        #[test]
        fn sums_of_lines_equal_totals(
            cur in currency(),
            lines in prop::collection::vec(
                (0i64..1_000_000, -10_000_000i64..10_000_000, 0u32..3000), 0..40),
            intruder in prop::option::of((currency(), 0usize..40)),
        ) {
            let mut pairs = Vec::new();
            let (mut sub, mut tax) = (0i128, 0i128);
            for (q, price, bp) in &lines {
                let amount = line_amount(Quantity(*q), Money::new(*price, cur)).unwrap();
                let exact = i128::from(*q) * i128::from(*price);
                // Within half a minor unit of the exact product (in thousandths: ≤ 500).
                prop_assert!((i128::from(amount.minor) * 1000 - exact).abs() <= 500);
                let t = tax_amount(amount, *bp).unwrap();
                sub += i128::from(amount.minor);
                tax += i128::from(t.minor);
                pairs.push((amount, t));
            }
            let totals = Totals::of(cur, pairs.clone()).unwrap();
            prop_assert_eq!(i128::from(totals.subtotal.minor), sub);
            prop_assert_eq!(i128::from(totals.tax.minor), tax);
            prop_assert_eq!(totals.total.minor, totals.subtotal.minor + totals.tax.minor);
            prop_assert_eq!(totals.total.currency, cur);
            if let Some((other, at)) = intruder
                && other != cur
            {
                let at = at.min(pairs.len());
                pairs.insert(at, (Money::new(1, other), Money::zero(other)));
                prop_assert_eq!(
                    Totals::of(cur, pairs),
                    Err(MoneyError::CurrencyMismatch(cur, other))
                );
            }
        }

        /// What `decimal` prints, `parse` reads back to the same amount.
        #[test]
        fn decimals_round_trip(cur in currency(), minor in any::<i64>()) {
            let m = Money::new(minor, cur);
            prop_assert_eq!(Money::parse(&m.decimal(), cur), Ok(m));
        }
    }
}
