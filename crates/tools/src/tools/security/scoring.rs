//! `get_security_posture`: the 0–100 posture scores of a device or the fleet, from the latest
//! security scans, with the factor weights, recommendations and trend.

use super::*;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PostureInput {
    /// One device (default: the whole fleet of the organization).
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    /// Trend window in days (1-365, default 30).
    #[schemars(range(min = 1, max = 365))]
    days: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WeightView {
    factor: String,
    label: String,
    /// Percent of the overall score.
    weight: u32,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevicePosture {
    device_id: String,
    hostname: String,
    /// 0-100.
    score: i64,
    /// low (>= 85), medium (>= 70), high (>= 45) or critical.
    risk_level: String,
    captured_at: String,
    scan_id: String,
    factors: Vec<FactorScore>,
    recommendations: Vec<Recommendation>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceScore {
    device_id: String,
    hostname: String,
    score: i64,
    risk_level: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FleetPosture {
    /// The average of the audited devices' newest scores (0-100).
    score: u32,
    risk_level: String,
    devices_audited: usize,
    /// Devices with no completed scan yet.
    devices_not_scanned: usize,
    /// Devices per risk level.
    risk_counts: BTreeMap<String, usize>,
    /// Each factor averaged over the audited devices.
    factors: Vec<FactorScore>,
    recommendations: Vec<Recommendation>,
    /// The lowest-scoring devices (at most 10).
    lowest_devices: Vec<DeviceScore>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TrendPoint {
    /// A snapshot's time (device), or a UTC day (fleet).
    at: String,
    score: i64,
    /// Devices averaged (fleet).
    devices: usize,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PostureOutput {
    /// device or fleet.
    scope: String,
    /// The factors and their weights.
    weights: Vec<WeightView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<DevicePosture>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetPosture>,
    /// Oldest first.
    trend: Vec<TrendPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn factors_of(s: &PostureSnapshot) -> Vec<FactorScore> {
    serde_json::from_value(s.factors.clone()).unwrap_or_default()
}

fn weights() -> Vec<WeightView> {
    FACTOR_WEIGHTS
        .iter()
        .map(|(f, l, w)| WeightView {
            factor: (*f).to_owned(),
            label: (*l).to_owned(),
            weight: *w,
        })
        .collect()
}

/// A device's posture from its newest snapshot (shared with the device resource).
pub(crate) async fn device_posture<R: Reach>(
    cx: &ToolCx<'_, R>,
    device: &Device,
) -> Result<Option<DevicePosture>, ToolError> {
    let latest = cx.security().latest_posture(device.id).await?;
    Ok(latest.map(|s| {
        let factors = factors_of(&s);
        DevicePosture {
            device_id: device.id.to_string(),
            hostname: device.hostname.clone(),
            score: s.score,
            risk_level: s.risk_level.clone(),
            captured_at: s.taken_at.to_rfc3339(),
            scan_id: s.scan_id.to_string(),
            recommendations: posture::recommendations(&factors),
            factors,
        }
    }))
}

/// Adds the device's newest posture (`securityPosture`: score, risk level, when, from which
/// scan; `null` before its first scan) to a device document.
pub(crate) async fn add_posture(
    security: breeze_store::OrgSecurity<'_>,
    device: DeviceId,
    doc: &mut Value,
) -> Result<(), StoreError> {
    let latest = security.latest_posture(device).await?;
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "securityPosture".into(),
            latest.map_or(Value::Null, |s| {
                serde_json::json!({
                    "score": s.score, "riskLevel": s.risk_level,
                    "capturedAt": s.taken_at.to_rfc3339(), "scanId": s.scan_id,
                })
            }),
        );
    }
    Ok(())
}

pub(crate) struct GetSecurityPosture;

impl Tool for GetSecurityPosture {
    const NAME: &'static str = "get_security_posture";
    const TITLE: &'static str = "Get security posture";
    const DESCRIPTION: &'static str = "Security posture scores (0-100) for one device or the whole fleet, from the latest security scans: the factor breakdown with stated weights (pending security updates 25, disk encryption 15, antivirus/EDR 15, firewall 10, listening services 10, SSH 10, world-writable files 10, indicators 5), recommendations ordered by points gained, and the trend over time.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = PostureInput;
    type Output = PostureOutput;
    type Reach = (reach::Devices, reach::Security);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let days = i64::from(input.days.unwrap_or(30));
        let since = cx.now() - chrono::Duration::days(days);
        if let Some(raw) = &input.device_id {
            let device = find_device(cx, raw).await?;
            let posture = device_posture(cx, &device).await?;
            let trend = cx
                .security()
                .posture_snapshots(Some(device.id), since, 1000)
                .await?
                .into_iter()
                .map(|s| TrendPoint {
                    at: s.taken_at.to_rfc3339(),
                    score: s.score,
                    devices: 1,
                })
                .collect();
            let message = posture.is_none().then(|| {
                "This device has no completed security scan; run security_scan with action scan"
                    .to_owned()
            });
            return Ok(PostureOutput {
                scope: "device".into(),
                weights: weights(),
                device: posture,
                fleet: None,
                trend,
                message,
            });
        }
        let latest = cx.security().latest_postures().await?;
        // The total alone: the answer names only its ten lowest devices, looked up below.
        let (_, total) = cx
            .devices()
            .list_devices(&DeviceFilter::default(), 0, 0)
            .await?;
        let audited = latest.len();
        let mut risk_counts: BTreeMap<String, usize> = ["low", "medium", "high", "critical"]
            .into_iter()
            .map(|r| (r.to_owned(), 0))
            .collect();
        let mut sums: BTreeMap<String, (u64, usize)> = BTreeMap::new();
        let mut score_sum = 0i64;
        for s in &latest {
            *risk_counts.entry(s.risk_level.clone()).or_insert(0) += 1;
            score_sum += s.score;
            for f in factors_of(s) {
                let e = sums.entry(f.factor).or_insert((0, 0));
                e.0 += u64::from(f.score);
                e.1 += 1;
            }
        }
        let factors: Vec<FactorScore> = FACTOR_WEIGHTS
            .iter()
            .map(|(factor, label, weight)| {
                let score = sums
                    .get(*factor)
                    .filter(|(_, n)| *n > 0)
                    .map_or(0, |(sum, n)| u32::try_from(sum / *n as u64).unwrap_or(0));
                FactorScore {
                    factor: (*factor).to_owned(),
                    label: (*label).to_owned(),
                    weight: *weight,
                    score,
                    impact: ((100 - score.min(100)) * weight + 50) / 100,
                    data_gap: None,
                    basis: vec![format!("average of {audited} device(s)")],
                }
            })
            .collect();
        let score = if audited == 0 {
            0
        } else {
            u32::try_from(score_sum / audited as i64).unwrap_or(0)
        };
        let mut lowest: Vec<&PostureSnapshot> = latest.iter().collect();
        lowest.sort_by_key(|s| s.score);
        lowest.truncate(10);
        let ids: Vec<DeviceId> = lowest.iter().map(|s| s.device_id).collect();
        let hostnames = cx.devices().hostnames(&ids).await?;
        let lowest: Vec<DeviceScore> = lowest
            .into_iter()
            .map(|s| DeviceScore {
                device_id: s.device_id.to_string(),
                hostname: hostnames.get(&s.device_id).cloned().unwrap_or_default(),
                score: s.score,
                risk_level: s.risk_level.clone(),
            })
            .collect();
        // Trend: per UTC day, each device's last snapshot of the day, averaged.
        let mut days_map: BTreeMap<String, BTreeMap<DeviceId, i64>> = BTreeMap::new();
        for s in cx
            .security()
            .posture_snapshots(None, since, 100_000)
            .await?
        {
            days_map
                .entry(s.taken_at.date_naive().to_string())
                .or_default()
                .insert(s.device_id, s.score);
        }
        let trend = days_map
            .into_iter()
            .map(|(day, scores)| TrendPoint {
                at: day,
                score: scores.values().sum::<i64>() / scores.len().max(1) as i64,
                devices: scores.len(),
            })
            .collect();
        let message = (audited == 0).then(|| {
            "No device has a completed security scan; run security_scan with action scan".to_owned()
        });
        Ok(PostureOutput {
            scope: "fleet".into(),
            weights: weights(),
            device: None,
            fleet: Some(FleetPosture {
                score,
                risk_level: RiskLevel::of(score).to_string(),
                devices_audited: audited,
                devices_not_scanned: (total as usize).saturating_sub(audited),
                risk_counts,
                recommendations: if audited == 0 {
                    Vec::new()
                } else {
                    posture::recommendations(&factors)
                },
                factors,
                lowest_devices: lowest,
            }),
            trend,
            message,
        })
    }
}
