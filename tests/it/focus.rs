//! The FOCUS export against the FinOps Foundation's own validator (PyPI `focus-validator`, its
//! bundled FOCUS 1.2 rules, offline). `.ci/run` installs it in a Python >= 3.12 virtual
//! environment and names it in `GPULEDGER_FOCUS_VALIDATOR`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::serving::parse_csv;
use crate::util::run;

/// What applies to a GPU chargeback: a named billing account with sub accounts (teams), usage
/// measured (GPU-hours), resources typed, tagged and billed as provisioned. Not: availability
/// zones, regions, capacity reservations, commitments, public price lists and SKUs, several
/// pricing categories or currencies.
const CRITERIA: &str = "ACCOUNT_NAMING_SUPPORTED,SUB_ACCOUNT_SUPPORTED,USAGE_MEASUREMENT_SUPPORTED,\
RESOURCE_TYPE_ASSIGNMENT_SUPPORTED,TAGGING_SUPPORTED,BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED";

/// The one check the validator reports failed on every dataset that has an InvoiceId column:
/// InvoiceId-C-003-C passes when either "InvoiceId is null" (C-004-C) or "InvoiceId is not
/// null" (C-005-C) holds, and the validator counts the branch not taken as a failure too.
const VALIDATOR_FALSE_POSITIVE: &str = "InvoiceId-C-004-C";

fn validator() -> PathBuf {
    let path = std::env::var_os("GPULEDGER_FOCUS_VALIDATOR").map(PathBuf::from);
    let path = path.unwrap_or_else(|| PathBuf::from("focus-validator"));
    // It writes a log where it runs: not into the checkout.
    let probe = Command::new(&path).arg("--help").current_dir(std::env::temp_dir()).output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "the FOCUS validator is needed for this test: a Python >= 3.12 venv with `pip install focus-validator 'numpy>=2'`, \
         named in GPULEDGER_FOCUS_VALIDATOR (.ci/run makes one); tried {}",
        path.display()
    );
    path
}

/// The validator's verdict on one file.
struct Verdict {
    passed: u32,
    failed: Vec<String>,
    output: String,
}

fn validate(validator: &Path, file: &Path) -> Verdict {
    // It reads its currency list relative to the working directory: run it where its package is.
    let python = validator.parent().map(|d| d.join("python")).filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from("python3"));
    let out = Command::new(&python)
        .args(["-c", "import focus_validator, os; print(os.path.dirname(os.path.dirname(focus_validator.__file__)))"])
        .output()
        .unwrap();
    assert!(out.status.success(), "finding the validator's package: {}", String::from_utf8_lossy(&out.stderr));
    let package_dir = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let out = Command::new(validator)
        .current_dir(&package_dir)
        .arg("--data-file")
        .arg(file)
        .args(["--validate-version", "1.2", "--block-download", "--applicability-criteria", CRITERIA])
        .output()
        .unwrap();
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "focus-validator on {}:\n{output}", file.display());
    // "Total: 578 | Pass: 183 | Fail: 1 | Skipped: 394", then "- <rule id>: violations=..." per failure.
    let summary = output.lines().find(|l| l.starts_with("Total: ")).unwrap_or_else(|| panic!("no summary line:\n{output}"));
    let field = |name: &str| -> u32 {
        let part = summary.split(" | ").find_map(|p| p.strip_prefix(name)).unwrap_or_else(|| panic!("{name} in {summary}"));
        part.trim().parse().unwrap()
    };
    let failed: Vec<String> = output.lines().filter_map(|l| l.strip_prefix("- ")?.split_once(':').map(|(id, _)| id.to_owned())).collect();
    assert_eq!(failed.len() as u32, field("Fail: "), "{output}");
    Verdict { passed: field("Pass: "), failed, output }
}

#[test]
fn focus_export_passes_the_focus_validator() {
    let validator = validator();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    // The demo's policies: platform-paid lost runs, no reconciliation.
    run(&["demo", "--out", &dir.display().to_string(), "--gpus", "8", "--days", "1"], 0);
    // The share policy: every team gets an Adjustment row moving unallocated cost.
    let share = tmp.path().join("share").join("focus-2026-10");
    let store = dir.join("store").display().to_string();
    let config = dir.join("gpuledger.toml").display().to_string();
    let share_arg = share.display().to_string();
    run(&["report", "--store", &store, "--config", &config, "--idle-policy", "share", "--format", "focus", "--out", &share_arg], 0);
    let share_csv = std::fs::read_to_string(share.with_extension("csv")).unwrap();
    assert!(share_csv.contains(",Adjustment,"), "the share policy's reconciliation rows: {share_csv}");

    // The quota policy: the owners of unused quota get the unallocated cost as Adjustment rows,
    // and each account's rows add up to its chargeback total under that policy.
    let quota = tmp.path().join("quota").join("focus-2026-10");
    let quota_arg = quota.display().to_string();
    run(&["report", "--store", &store, "--config", &config, "--idle-policy", "quota", "--format", "focus", "--out", &quota_arg], 0);
    let rows = parse_csv(&std::fs::read_to_string(quota.with_extension("csv")).unwrap());
    let col = |name: &str| rows[0].iter().position(|c| c == name).unwrap();
    let (account, billed, category) = (col("SubAccountName"), col("BilledCost"), col("ChargeCategory"));
    assert!(rows.iter().skip(1).any(|r| r[category] == "Adjustment" && r[account] != "platform"), "an owner of unused quota is charged");
    let mut focus_total: std::collections::BTreeMap<String, f64> = Default::default();
    for r in rows.iter().skip(1) {
        *focus_total.entry(r[account].clone()).or_default() += r[billed].parse::<f64>().unwrap();
    }
    let chargeback = String::from_utf8(run(&["report", "--store", &store, "--config", &config, "--idle-policy", "quota", "--format", "csv"], 0).stdout).unwrap();
    let cb = parse_csv(&chargeback);
    let (team, total) = (cb[0].iter().position(|c| c == "team").unwrap(), cb[0].iter().position(|c| c == "total").unwrap());
    for r in cb.iter().skip(1) {
        let want: f64 = r[total].parse().unwrap();
        let got = focus_total.get(&r[team]).copied().unwrap_or(0.0);
        // The chargeback CSV has 4 decimals; the FOCUS rows are exact to the micro-unit.
        assert!((got - want).abs() <= 5e-5 + 1e-9, "{}: FOCUS rows {got}, chargeback total {want}", r[team]);
    }

    for file in [dir.join("focus-2026-10.csv"), dir.join("focus-2026-10.parquet"), share.with_extension("csv"), share.with_extension("parquet"), quota.with_extension("csv")] {
        let v = validate(&validator, &file);
        assert_eq!(v.failed, [VALIDATOR_FALSE_POSITIVE], "{}:\n{}", file.display(), v.output);
        assert!(v.output.contains("InvoiceId-C-003-C: PASS"), "the InvoiceId nullability rule itself passes:\n{}", v.output);
        // Every mandatory column and those the criteria bring are checked, not skipped.
        assert!(v.passed >= 150, "{} checks passed:\n{}", v.passed, v.output);
    }

    // The check can fail: an invoice issuer other than the provider makes the rows a third
    // party's, whose BilledCost FOCUS wants 0.
    let tampered = tmp.path().join("tampered.csv");
    let mut records = parse_csv(&std::fs::read_to_string(dir.join("focus-2026-10.csv")).unwrap());
    let issuer = records[0].iter().position(|c| c == "InvoiceIssuerName").unwrap();
    records.iter_mut().skip(1).for_each(|r| r[issuer] = "Someone else".to_owned());
    // Back to CSV: quoted where a field holds a comma or a quote (descriptions, tags).
    let field = |f: &String| if f.contains([',', '"']) { format!("\"{}\"", f.replace('"', "\"\"")) } else { f.clone() };
    let text: String = records.iter().map(|r| r.iter().map(field).collect::<Vec<_>>().join(",") + "\n").collect();
    std::fs::write(&tampered, text).unwrap();
    let v = validate(&validator, &tampered);
    assert!(v.failed.iter().any(|id| id == "BilledCost-C-005-C"), "{:?}", v.failed);
}
