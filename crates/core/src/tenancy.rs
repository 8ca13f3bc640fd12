//! The tenancy hierarchy above devices: partners, organizations, sites and device groups.
//!
//! The organization is the unit of isolation: every row below it carries its `org_id`, and
//! every tenant-facing query is filtered by it.

use serde::Serialize;

use crate::{DeviceGroupId, OrgId, PartnerId, SiteId, Timestamp};

/// An MSP: owns organizations and partner-level users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct Partner {
    pub id: PartnerId,
    pub name: String,
    pub slug: String,
    pub created_at: Timestamp,
}

/// One customer of a partner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct Organization {
    pub id: OrgId,
    pub partner_id: PartnerId,
    pub name: String,
    /// Unique across the installation; usable wherever an id is (`--org acme`).
    pub slug: String,
    pub created_at: Timestamp,
}

/// A location within an organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct Site {
    pub id: SiteId,
    pub org_id: OrgId,
    pub name: String,
    /// IANA time zone name, e.g. `Europe/Berlin`.
    pub timezone: String,
    pub created_at: Timestamp,
}

/// A set of devices within an organization. Membership is static (explicit rows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct DeviceGroup {
    pub id: DeviceGroupId,
    pub org_id: OrgId,
    pub site_id: Option<SiteId>,
    pub name: String,
    pub description: Option<String>,
    pub created_at: Timestamp,
}

/// Checks a slug: 1–63 characters of `a-z`, `0-9` and `-`, not starting or ending with `-`.
pub fn validate_slug(slug: &str) -> Result<(), crate::ParseError> {
    let ok = (1..=63).contains(&slug.len())
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !slug.starts_with('-')
        && !slug.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(crate::ParseError {
            what: "slug",
            value: slug.to_owned(),
            expected: "1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'",
        })
    }
}

/// Derives a slug from a display name: `"Acme Corp."` → `"acme-corp"`.
pub fn slugify(name: &str) -> String {
    let mut slug = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    slug.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slugify("Acme Corp."), "acme-corp");
        assert_eq!(slugify("  Globex -- West "), "globex-west");
        assert!(validate_slug("acme-corp").is_ok());
        for bad in ["", "-acme", "acme-", "Acme", "acme corp", &"a".repeat(64)] {
            assert!(validate_slug(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
