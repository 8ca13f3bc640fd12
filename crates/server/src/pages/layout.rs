//! What `base.html` needs on every page: the title, the signed-in person, the current
//! organization, the organization switcher, the navigation, the CSRF token and asset URLs.

use breeze_core::Organization;

use super::{PageError, SignedIn, assets};
use crate::AppState;

/// A part of the dashboard, for the navigation and the organization switcher (which links to
/// the same part of another organization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Home,
    Alerts,
    Approvals,
    Devices,
    Scripts,
    Patches,
    Policies,
    Reports,
    Organization,
    Tickets,
    Invoices,
    Quotes,
    Contracts,
    Audit,
    /// Live queries across the fleet.
    LiveQueries,
    /// Vulnerability exposure from installed packages.
    Vulnerabilities,
    /// The AI assistant's chat.
    Chat,
    ToolSources,
    ApiKeys,
    Mcp,
    Apps,
}

impl Section {
    /// The section's path below `/o/{org}`.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Section::Home => "",
            Section::Alerts => "/alerts",
            Section::Approvals => "/approvals",
            Section::Devices => "/devices",
            Section::Scripts => "/scripts",
            Section::Patches => "/patches",
            Section::Policies => "/policies",
            Section::Reports => "/reports",
            Section::Organization => "/groups",
            Section::Tickets => "/tickets",
            Section::Invoices => "/invoices",
            Section::Quotes => "/quotes",
            Section::Contracts => "/contracts",
            Section::Audit => "/audit",
            Section::LiveQueries => "/live-queries",
            Section::Vulnerabilities => "/vulnerabilities",
            Section::Chat => "/chat",
            Section::ToolSources => "/ai/tool-sources",
            Section::ApiKeys => "/settings/api-keys",
            Section::Mcp => "/settings/mcp",
            Section::Apps => "/settings/apps",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Section::Home => "Overview",
            Section::Alerts => "Alerts",
            Section::Approvals => "Approvals",
            Section::Devices => "Devices",
            Section::Scripts => "Scripts",
            Section::Patches => "Patches",
            Section::Policies => "Policies",
            Section::Reports => "Reports",
            Section::Organization => "Organization",
            Section::Tickets => "Tickets",
            Section::Invoices => "Invoices",
            Section::Quotes => "Quotes",
            Section::Contracts => "Contracts",
            Section::Audit => "Audit log",
            Section::LiveQueries => "Live query",
            Section::Vulnerabilities => "Vulnerabilities",
            Section::Chat => "Assistant",
            Section::ToolSources => "Tool sources",
            Section::ApiKeys => "API keys",
            Section::Mcp => "MCP",
            Section::Apps => "Connected apps",
        }
    }
}

/// A link to an organization (switcher) or a section (navigation).
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) href: String,
    pub(crate) label: String,
    pub(crate) active: bool,
}

/// The base page context every template receives as `l`.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) title: String,
    /// The session's CSRF token; empty when nobody is signed in.
    pub(crate) csrf: String,
    pub(crate) signed_in: bool,
    pub(crate) user_name: String,
    pub(crate) user_email: String,
    /// The current organization's slug and name (empty outside an organization).
    pub(crate) org_slug: String,
    pub(crate) org_name: String,
    /// Every organization the person can reach, linking to the current section there.
    pub(crate) orgs: Vec<Link>,
    pub(crate) nav: Vec<Link>,
    pub(crate) settings: Vec<Link>,
    /// Where the navigation's assistant link goes: the chat, with what this page shows as
    /// its context (see [`Layout::chat_about`]).
    pub(crate) chat_context: String,
    /// The organization's live-update stream (`/o/{org}/events`), empty outside one.
    pub(crate) events: String,
    pub(crate) css: &'static str,
    pub(crate) js: &'static str,
    pub(crate) htmx: &'static str,
    pub(crate) icon: &'static str,
}

impl Layout {
    /// A page for nobody in particular (sign-in, errors).
    pub(crate) fn bare(title: &str) -> Self {
        Self {
            title: title.to_owned(),
            csrf: String::new(),
            signed_in: false,
            user_name: String::new(),
            user_email: String::new(),
            org_slug: String::new(),
            org_name: String::new(),
            orgs: Vec::new(),
            nav: Vec::new(),
            settings: Vec::new(),
            chat_context: String::new(),
            events: String::new(),
            css: assets::url("app.css"),
            js: assets::url("app.js"),
            htmx: assets::url("htmx.min.js"),
            icon: assets::url("favicon.svg"),
        }
    }

    /// A signed-in page, in organization `org` when there is one, showing `section`.
    pub(crate) async fn for_user(
        state: &AppState,
        who: &SignedIn,
        org: Option<&Organization>,
        section: Section,
        title: &str,
    ) -> Result<Self, PageError> {
        let mut l = Self::bare(title);
        l.csrf = who.csrf.clone();
        l.signed_in = true;
        l.user_name = who.user.name.clone();
        l.user_email = who.user.email.clone();
        let memberships = state.store.user_organizations(who.user.id).await?;
        l.orgs = memberships
            .iter()
            .map(|(o, _)| Link {
                href: format!("/o/{}{}", o.slug, section.suffix()),
                label: o.name.clone(),
                active: org.is_some_and(|c| c.id == o.id),
            })
            .collect();
        if let Some(org) = org {
            l.org_slug = org.slug.clone();
            l.org_name = org.name.clone();
            l.events = format!("/o/{}/events", org.slug);
            let link = |s: Section| Link {
                href: format!("/o/{}{}", org.slug, s.suffix()),
                label: s.label().to_owned(),
                active: s == section,
            };
            l.nav = [
                Section::Home,
                Section::Alerts,
                Section::Approvals,
                Section::Devices,
                Section::LiveQueries,
                Section::Vulnerabilities,
                Section::Scripts,
                Section::Patches,
                Section::Policies,
                Section::Reports,
                Section::Organization,
                Section::Tickets,
                Section::Invoices,
                Section::Quotes,
                Section::Contracts,
                Section::Audit,
                Section::Chat,
                Section::ToolSources,
            ]
            .into_iter()
            .map(link)
            .collect();
            l.chat_context = format!("/o/{}{}", org.slug, Section::Chat.suffix());
            l.settings = [Section::ApiKeys, Section::Mcp, Section::Apps]
                .into_iter()
                .map(link)
                .collect();
        }
        Ok(l)
    }
}

impl Layout {
    /// Makes the navigation's assistant link open the chat about what this page shows
    /// (`query`: `device=<id>`, `alert=<id>` or `context=overview`): the chat page injects it
    /// into a new session as its page context.
    pub(crate) fn chat_about(&mut self, query: &str) {
        if self.org_slug.is_empty() {
            return;
        }
        let href = format!("/o/{}{}?{query}", self.org_slug, Section::Chat.suffix());
        for link in &mut self.nav {
            if link.href == self.chat_context {
                link.href.clone_from(&href);
            }
        }
        self.chat_context = href;
    }
}
