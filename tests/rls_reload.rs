//! Hot reload of `rls.config`.

mod rls_support;
mod support;

use rls_support::{CONFIG, config_file, desc, request, rls_settings, start};

/// `rls.config` is reloaded on change; a broken edit keeps the config in force.
#[tokio::test]
async fn the_config_is_hot_reloaded() {
    let path = config_file(CONFIG);
    let mut settings = rls_settings(None, path.clone());
    settings.policies_poll_interval = std::time::Duration::from_millis(50);
    let rls = start(settings).await;
    let ask = || request("edge", vec![desc(&[("global", "reload")])]);
    assert_eq!(rls.codes(ask()).await.2, [4]);
    std::fs::write(&path, "domain: edge\ndescriptors: [{ key: unknown_key: x\n").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        rls.codes(ask()).await.2,
        [3],
        "a broken file keeps the old config"
    );
    let changed = CONFIG.replace(
        "requests_per_unit: 5, name: global",
        "requests_per_unit: 50, name: global",
    );
    std::fs::write(&path, changed).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let remaining = rls.codes(ask()).await.2[0];
        if remaining > 40 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not reloaded");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
