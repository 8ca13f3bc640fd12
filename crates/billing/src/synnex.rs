//! TD SYNNEX EC Express price and availability ("PNA"), as its XML interface is used: an HTTPS
//! `POST` of an XML `priceRequest` to `/SynnexXML/PriceAvailability` on the region's EC
//! Express host (`ec.us.tdsynnex.com`, `ec.ca.tdsynnex.com`), answered by a `priceResponse`.
//!
//! ```text
//! <priceRequest>
//!   <customerNo>…</customerNo><userName>…</userName><password>…</password>
//!   <skuList><synnexSKU>5649807</synnexSKU><lineNumber>1</lineNumber></skuList>
//!   (or <skuList><mfgPN>…</mfgPN><lineNumber>1</lineNumber></skuList>)
//! </priceRequest>
//!
//! <priceResponse>
//!   <customerNo>…</customerNo><userName>…</userName>
//!   <PriceAvailabilityList>
//!     <synnexSKU/><mfgPN/><mfgCode/><status>Active | Not found | Discontinued</status>
//!     <description/><GlobalProductStatusCode/><price>27.12</price>[<msrp>…</msrp>]
//!     <totalQuantity>2</totalQuantity>
//!     <AvailabilityByWarehouse>
//!       <warehouseInfo><number/><zipcode/><city/><addr/></warehouseInfo><qty/>
//!     </AvailabilityByWarehouse>…
//!     <lineNumber>1</lineNumber>
//!   </PriceAvailabilityList>
//! </priceResponse>
//! ```
//!
//! An account-level failure (a wrong password, an account not enabled for XML) comes back as
//! an `errorDetail` (or `errorMessage`) element instead of the list. The price is the
//! reseller's cost in the region's currency (USD in the US, CAD in Canada); the response names
//! no currency. Prices are decimal text, read exactly (no floating point) and rounded once to
//! the cent, half away from zero, when they carry more places.

use std::time::Duration;

use breeze_core::{Currency, Money, PartnerId, UserKind};
use breeze_sources::egress;
use reqwest13 as reqwest;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::{
    BillingError, OrgBilling, ProviderError, Purpose, Result,
    xml::{self, Element},
};

/// How long one lookup may take.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The largest answer read.
const MAX_ANSWER: usize = 1024 * 1024;
/// The longest SKU or part number asked about.
pub const MAX_PART: usize = 50;

/// A TD SYNNEX EC Express account: customer number, user name and password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SynnexAccount {
    pub customer_no: String,
    pub user_name: String,
    pub password: String,
}

impl std::fmt::Debug for SynnexAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SynnexAccount")
            .field("customer_no", &self.customer_no)
            .finish_non_exhaustive()
    }
}

impl SynnexAccount {
    pub(crate) fn check(&self) -> Result<()> {
        for (field, v) in [
            ("customer number", &self.customer_no),
            ("user name", &self.user_name),
            ("password", &self.password),
        ] {
            if v.trim().is_empty() || v.len() > 200 || v.chars().any(char::is_control) {
                return Err(breeze_store::StoreError::Invalid(format!(
                    "the TD SYNNEX {field} is required (at most 200 characters)"
                ))
                .into());
            }
        }
        Ok(())
    }
}

/// What to look up: one TD SYNNEX SKU or one manufacturer part number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProductQuery {
    Sku(String),
    MfgPartNumber(String),
}

impl ProductQuery {
    fn check(&self) -> Result<&str> {
        let (ProductQuery::Sku(v) | ProductQuery::MfgPartNumber(v)) = self;
        let v = v.trim();
        if v.is_empty()
            || v.len() > MAX_PART
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./#+ ".contains(c))
        {
            return Err(breeze_store::StoreError::Invalid(format!(
                "a SKU or part number is 1 to {MAX_PART} letters, digits and - _ . / # +"
            ))
            .into());
        }
        Ok(v)
    }
}

/// One warehouse's stock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Warehouse {
    pub number: String,
    pub city: String,
    pub zip: String,
    pub quantity: i64,
}

/// A product's price and availability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    pub sku: String,
    pub mfg_part_number: String,
    pub mfg_code: String,
    pub description: String,
    /// `Active`, `Discontinued`, …
    pub status: String,
    /// The reseller's cost; `None` when redacted for an organization's caller, or not given.
    pub reseller_cost: Option<Money>,
    /// The manufacturer's suggested retail price, when the answer carries one.
    pub msrp: Option<Money>,
    pub currency: Currency,
    pub total_stock: i64,
    pub warehouses: Vec<Warehouse>,
    /// Whether the reseller cost was withheld from this caller.
    pub cost_redacted: bool,
}

/// The EC Express host of `region` (`us`, `ca`).
pub fn endpoint(region: &str) -> Url {
    let host = if region == "ca" {
        "https://ec.ca.tdsynnex.com"
    } else {
        "https://ec.us.tdsynnex.com"
    };
    Url::parse(host).unwrap_or_else(|_| unreachable!("a URL"))
}

/// The currency EC Express prices `region` in.
pub fn currency(region: &str) -> Currency {
    Currency::parse(if region == "ca" { "CAD" } else { "USD" })
        .unwrap_or_else(|_| unreachable!("a known currency"))
}

/// The `priceRequest` document for one product.
pub fn request_xml(account: &SynnexAccount, query: &ProductQuery) -> String {
    let (tag, value) = match query {
        ProductQuery::Sku(v) => ("synnexSKU", v.trim()),
        ProductQuery::MfgPartNumber(v) => ("mfgPN", v.trim()),
    };
    let e = xml::escape;
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<priceRequest>\
         <customerNo>{}</customerNo><userName>{}</userName><password>{}</password>\
         <skuList><{tag}>{}</{tag}><lineNumber>1</lineNumber></skuList></priceRequest>",
        e(&account.customer_no),
        e(&account.user_name),
        e(&account.password),
        e(value)
    )
}

/// Reads a `priceResponse`: the product, or why there is none.
pub fn read_response(body: &str, currency: Currency) -> Result<Availability, LookupError> {
    let root = xml::parse(body).map_err(|e| LookupError::Malformed(e.to_string()))?;
    if root.name != "priceResponse" {
        return Err(LookupError::Malformed(format!(
            "the answer is <{}>, not <priceResponse>",
            root.name
        )));
    }
    if let Some(why) = root
        .text_of("errorDetail")
        .or_else(|| root.text_of("errorMessage"))
    {
        return Err(LookupError::Refused(why.chars().take(300).collect()));
    }
    let item = root
        .child("PriceAvailabilityList")
        .ok_or(LookupError::NotFound)?;
    let status = item.text_of("status").unwrap_or("").to_owned();
    if status.eq_ignore_ascii_case("not found") {
        return Err(LookupError::NotFound);
    }
    let text = |e: &Element, n: &str| e.text_of(n).unwrap_or("").to_owned();
    let money = |n: &str| -> Result<Option<Money>, LookupError> {
        item.text_of(n)
            .map(|t| {
                decimal_money(t, currency)
                    .ok_or_else(|| LookupError::Malformed(format!("<{n}>{t}</{n}> is not a price")))
            })
            .transpose()
    };
    let count = |e: &Element, n: &str| -> Result<i64, LookupError> {
        e.text_of(n).map_or(Ok(0), |t| {
            t.parse::<i64>()
                .map_err(|_| LookupError::Malformed(format!("<{n}>{t}</{n}> is not a count")))
        })
    };
    let mut warehouses = Vec::new();
    for w in item.all("AvailabilityByWarehouse") {
        let info = w.child("warehouseInfo").cloned().unwrap_or_default();
        warehouses.push(Warehouse {
            number: text(&info, "number"),
            city: text(&info, "city"),
            zip: text(&info, "zipcode"),
            quantity: count(w, "qty")?,
        });
    }
    Ok(Availability {
        sku: text(item, "synnexSKU"),
        mfg_part_number: text(item, "mfgPN"),
        mfg_code: text(item, "mfgCode"),
        description: text(item, "description"),
        status,
        reseller_cost: money("price")?,
        msrp: money("msrp")?,
        currency,
        total_stock: count(item, "totalQuantity")?,
        warehouses,
        cost_redacted: false,
    })
}

/// A decimal price (`27.12`, `27.1`, `27.1250`) in `currency`, exact, rounded once to the
/// minor unit half away from zero when it has more places.
fn decimal_money(text: &str, currency: Currency) -> Option<Money> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || whole.len() > 15
        || frac.len() > 6
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // Micro-units, then rounded to the currency's exponent.
    let mut micro: i128 = whole.parse().ok()?;
    for i in 0..6 {
        micro = micro * 10 + frac.as_bytes().get(i).map_or(0, |b| i128::from(b - b'0'));
    }
    let step = 10i128.pow(6 - currency.exponent());
    let minor = (micro + step / 2) / step;
    Some(Money::new(i64::try_from(minor).ok()?, currency))
}

/// Why a lookup found no product.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("TD SYNNEX has no such product")]
    NotFound,
    #[error("TD SYNNEX refused the request: {0}")]
    Refused(String),
    #[error("TD SYNNEX's answer was not understood: {0}")]
    Malformed(String),
}

impl From<LookupError> for BillingError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NotFound => {
                BillingError::Store(breeze_store::StoreError::NotFound("distributor product"))
            }
            LookupError::Refused(m) => BillingError::Provider(ProviderError::Refused {
                status: 200,
                kind: "synnex_error".into(),
                code: None,
                message: m,
            }),
            LookupError::Malformed(m) => BillingError::Provider(ProviderError::Malformed(m)),
        }
    }
}

impl OrgBilling<'_> {
    /// Looks one product up at TD SYNNEX for the organization's partner, acting for `user`.
    /// A partner's own user sees the reseller cost; an organization's user gets availability
    /// with the cost withheld. A user who is not the partner's, or a partner without an
    /// account, gets an error before any request is made.
    pub async fn lookup_product(
        &self,
        user: breeze_core::UserId,
        query: &ProductQuery,
    ) -> Result<Availability> {
        query.check()?;
        let org = self.org.tenancy().organization().await?;
        let partner: PartnerId = org.partner_id;
        let person = self
            .billing
            .store
            .get_user(user)
            .await
            .map_err(|_| BillingError::NoPartner)?;
        if person.partner_id != partner {
            return Err(BillingError::NoPartner);
        }
        let partner_wide = matches!(person.kind, UserKind::Partner);
        let row = self.billing.store.partner_billing(partner).await?;
        let (sealed, region) = match row.and_then(|r| Some((r.synnex_account?, r.synnex_region))) {
            Some((s, r)) => (s, r.unwrap_or_else(|| "us".into())),
            None => {
                return Err(BillingError::NotConfigured(
                    "no TD SYNNEX account is set up for this partner: no lookup was made".into(),
                ));
            }
        };
        let account: SynnexAccount =
            serde_json::from_str(&self.billing.open(Purpose::Synnex, partner, &sealed)?).map_err(
                |_| {
                    BillingError::NotConfigured(
                        "the stored TD SYNNEX account is unreadable; set it again".into(),
                    )
                },
            )?;
        let base = self
            .billing
            .config
            .synnex_api
            .clone()
            .unwrap_or_else(|| endpoint(&region));
        let url = base
            .join("/SynnexXML/PriceAvailability")
            .map_err(|e| ProviderError::Invalid(e.to_string()))?;
        let e = &self.billing.egress;
        let response = e
            .client()
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/xml")
            .body(request_xml(&account, query))
            .timeout(TIMEOUT)
            .send()
            .await
            .map_err(|err| ProviderError::Unreachable(egress::http_error(&err).to_string()))?;
        egress::refuse_redirect(&response)
            .map_err(|err| ProviderError::Unreachable(err.to_string()))?;
        let status = response.status();
        let body = egress::read_capped(response, MAX_ANSWER)
            .await
            .map_err(|err| ProviderError::Unreachable(err.to_string()))?;
        if !status.is_success() {
            return Err(ProviderError::Refused {
                status: status.as_u16(),
                kind: "http".into(),
                code: None,
                message: format!("TD SYNNEX answered {status}"),
            }
            .into());
        }
        let body = String::from_utf8(body)
            .map_err(|_| ProviderError::Malformed("the answer is not UTF-8".into()))?;
        let mut found = read_response(&body, currency(&region))?;
        if !partner_wide {
            found.reseller_cost = None;
            found.cost_redacted = true;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use super::*;

    #[test]
    fn requests_and_answers_in_the_documented_shape() {
        let account = SynnexAccount {
            customer_no: "1150897".into(),
            user_name: "buyer@msp.example".into(),
            password: "p<&>ss".into(),
        };
        let req = request_xml(&account, &ProductQuery::MfgPartNumber("52107201".into()));
        let root = xml::parse(&req).unwrap();
        assert_eq!(root.name, "priceRequest");
        assert_eq!(root.text_of("password"), Some("p<&>ss"));
        let sku = root.child("skuList").unwrap();
        assert_eq!(sku.text_of("mfgPN"), Some("52107201"));
        assert_eq!(sku.text_of("lineNumber"), Some("1"));

        let usd = currency("us");
        let answer = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<priceResponse>\
            <customerNo>1150897</customerNo><userName>buyer@msp.example</userName>\
            <PriceAvailabilityList><synnexSKU>1031808</synnexSKU><mfgPN>52107201</mfgPN>\
            <mfgCode>676</mfgCode><status>Active</status>\
            <description>TONER-CART BLK</description>\
            <GlobalProductStatusCode>Active</GlobalProductStatusCode><price>27.125</price>\
            <totalQuantity>2</totalQuantity>\
            <AvailabilityByWarehouse><warehouseInfo><number>6</number><zipcode>60446</zipcode>\
            <city>Romeoville, IL</city><addr>1180 Remington Blvd</addr></warehouseInfo>\
            <qty>1</qty></AvailabilityByWarehouse>\
            <AvailabilityByWarehouse><warehouseInfo><number>7</number><zipcode>38654</zipcode>\
            <city>Olive Branch, MS</city><addr>x</addr></warehouseInfo><qty>1</qty>\
            </AvailabilityByWarehouse><lineNumber>1</lineNumber></PriceAvailabilityList>\
            </priceResponse>";
        let a = read_response(answer, usd).unwrap();
        assert_eq!(a.sku, "1031808");
        // 27.125 rounds half away from zero to 27.13.
        assert_eq!(a.reseller_cost, Some(Money::new(2713, usd)));
        assert_eq!(a.msrp, None);
        assert_eq!(a.total_stock, 2);
        assert_eq!(a.warehouses.len(), 2);
        assert_eq!(a.warehouses[0].city, "Romeoville, IL");

        let not_found = "<priceResponse><PriceAvailabilityList><mfgPN>x</mfgPN>\
            <status>Not found</status><lineNumber>1</lineNumber></PriceAvailabilityList>\
            </priceResponse>";
        assert_eq!(read_response(not_found, usd), Err(LookupError::NotFound));
        let refused = "<priceResponse><errorDetail>Invalid login</errorDetail></priceResponse>";
        assert_eq!(
            read_response(refused, usd),
            Err(LookupError::Refused("Invalid login".into()))
        );
        for bad in [
            "<html>nope</html>",
            "<priceResponse><PriceAvailabilityList><price>1e3</price></PriceAvailabilityList></priceResponse>",
        ] {
            assert!(
                matches!(read_response(bad, usd), Err(LookupError::Malformed(_))),
                "{bad}"
            );
        }
        assert_eq!(decimal_money("0.005", usd), Some(Money::new(1, usd)));
        assert_eq!(decimal_money("10", usd), Some(Money::new(1000, usd)));
        assert_eq!(decimal_money("-1", usd), None);
        assert_eq!(decimal_money("1.2345678", usd), None);
    }
}
