//! The egress rules, each attacked: plain http, user info, private addresses by literal and by
//! DNS answer (also mixed with a public one), a name judged again on every connection, a
//! redirect never followed, an answer over the cap, a server that hangs, an untrusted
//! certificate.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Router, http::StatusCode, routing::get};
use breeze_sources::{
    egress::{self, Egress, EgressConfig, EgressError, Lookup},
    testing::TestCa,
};
use futures::future::BoxFuture;

/// Answers every name with `answer`, counting lookups.
struct Fixed {
    answer: Vec<IpAddr>,
    lookups: Arc<AtomicUsize>,
}

impl Lookup for Fixed {
    fn lookup(&self, _host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let answer = self.answer.clone();
        Box::pin(async move { Ok(answer) })
    }
}

fn fixed(config: &EgressConfig, answer: &[&str]) -> (Egress, Arc<AtomicUsize>) {
    let lookups = Arc::new(AtomicUsize::new(0));
    let lookup = Fixed {
        answer: answer.iter().map(|a| a.parse().unwrap()).collect(),
        lookups: lookups.clone(),
    };
    (
        Egress::with_lookup(config, Arc::new(lookup)).unwrap(),
        lookups,
    )
}

async fn get_text(egress: &Egress, url: &str) -> Result<String, EgressError> {
    let url = egress.check_url(url)?;
    let response = egress
        .client()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| egress::http_error(&e))?;
    egress::refuse_redirect(&response)?;
    let body = egress::read_capped(response, 1024).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn ok_router() -> Router {
    Router::new()
        .route("/ok", get(|| async { "fine" }))
        .route(
            "/redirect",
            get(|| async { (StatusCode::FOUND, [("location", "https://localhost/ok")]) }),
        )
        .route("/big", get(|| async { "y".repeat(4096) }))
        .route(
            "/hang",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                "late"
            }),
        )
}

#[tokio::test]
async fn urls_must_be_https_without_user_info_and_literals_must_be_public() {
    let ca = TestCa::new();
    let strict = Egress::new(&ca.config(false)).unwrap();
    for (url, want) in [
        ("http://example.com/mcp", "https"),
        ("ftp://example.com/", "https"),
        ("https://user:pw@example.com/", "user name"),
        ("https://127.0.0.1/mcp", "127.0.0.1"),
        ("https://[::1]/mcp", "::1"),
        (
            "https://169.254.169.254/latest/meta-data",
            "169.254.169.254",
        ),
        ("https://100.64.1.1/", "100.64.1.1"),
        ("https://[::ffff:10.0.0.1]/", "10.0.0.1"),
        ("not a url", "not a URL"),
    ] {
        let err = strict.check_url(url).unwrap_err();
        assert!(err.to_string().contains(want), "{url}: {err}");
    }
    assert!(strict.check_url("https://api.example.com/v1").is_ok());
    // With private egress allowed, a literal loopback passes the URL check.
    let open = Egress::new(&ca.config(true)).unwrap();
    assert!(open.check_url("https://127.0.0.1/mcp").is_ok());
    assert!(
        open.check_url("http://127.0.0.1/mcp").is_err(),
        "https stays required"
    );
}

#[tokio::test]
async fn a_name_resolving_inside_is_refused_at_the_connection() {
    let ca = TestCa::new();
    let addr = ca.serve(ok_router(), true).await;
    // The URL check passes (a name), the connection is refused by what the name resolves to:
    // a private address alone, or hidden behind a public one in the same answer.
    for answer in [
        &["127.0.0.1"][..],
        &["8.8.8.8", "127.0.0.1"],
        &["169.254.169.254"],
    ] {
        let (egress, lookups) = fixed(&ca.config(false), answer);
        let url = format!("https://tenant-docs.example.com:{}/ok", addr.port());
        let err = get_text(&egress, &url).await.unwrap_err();
        assert!(
            matches!(err, EgressError::PrivateAddress { .. }),
            "{answer:?}: {err}"
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
    }
    // The real resolver: `localhost` is loopback, refused without the setting.
    let strict = Egress::new(&ca.config(false)).unwrap();
    let err = get_text(&strict, &format!("https://localhost:{}/ok", addr.port()))
        .await
        .unwrap_err();
    assert!(matches!(err, EgressError::PrivateAddress { .. }), "{err}");
    // With the setting and the test CA, the same server answers.
    assert_eq!(
        get_text(
            &ca.egress(),
            &format!("https://localhost:{}/ok", addr.port())
        )
        .await
        .unwrap(),
        "fine"
    );
}

#[tokio::test]
async fn every_new_connection_resolves_and_is_judged_again() {
    // DNS rebinding needs a second resolution the first check did not see. There is no check
    // apart from the connection's own: each new connection asks the guarded resolver again.
    let ca = TestCa::new();
    let addr = ca.serve(ok_router(), false).await; // every answer closes its connection
    let (egress, lookups) = fixed(&ca.config(true), &["127.0.0.1"]);
    // `localhost` for the certificate; the answer is the injected resolver's.
    let url = format!("https://localhost:{}/ok", addr.port());
    for n in 1..=3 {
        assert_eq!(get_text(&egress, &url).await.unwrap(), "fine");
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            n,
            "connection {n} resolved anew"
        );
    }
}

#[tokio::test]
async fn redirects_are_never_followed_and_caps_and_timeouts_hold() {
    let ca = TestCa::new();
    let addr = ca.serve(ok_router(), true).await;
    let egress = ca.egress();
    let base = format!("https://localhost:{}", addr.port());
    let err = get_text(&egress, &format!("{base}/redirect"))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EgressError::Redirect {
            status: 302,
            location: " to https://localhost/ok".into()
        }
    );
    let err = get_text(&egress, &format!("{base}/big")).await.unwrap_err();
    assert_eq!(err, EgressError::TooLarge { limit: 1024 });
    let started = std::time::Instant::now();
    let url = egress.check_url(&format!("{base}/hang")).unwrap();
    let err = egress
        .client()
        .get(url)
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_is_refused() {
    let ca = TestCa::new();
    let addr = ca.serve(ok_router(), true).await;
    // Private egress allowed, but no extra roots: the web PKI does not know the test CA.
    let egress = Egress::new(&EgressConfig {
        allow_private: true,
        extra_roots_pem: None,
    })
    .unwrap();
    let err = get_text(&egress, &format!("https://localhost:{}/ok", addr.port()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    assert!(
        Egress::new(&EgressConfig {
            allow_private: false,
            extra_roots_pem: Some(b"not a pem".to_vec()),
        })
        .is_err()
    );
}
