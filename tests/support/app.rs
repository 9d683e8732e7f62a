//! The service itself, in process on port 0, and a client for it.

use std::time::Duration;

use ratekeeper::app::{Application, Backend};
use ratekeeper::config::{Overrides, Settings};

/// Settings for a test instance: port 0, defaults otherwise, no environment.
pub fn settings(redis_url: Option<&str>) -> Settings {
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".into()),
        redis_url: redis_url.map(str::to_string),
        ..Default::default()
    };
    let env = config::Environment::default().source(Some(Default::default()));
    Settings::load_from(&overrides, env).expect("test settings are valid")
}

/// A running service and a client for it.
pub struct TestApp {
    pub base: String,
    pub http: reqwest::Client,
    /// The policies in force: store a new set to swap it in.
    pub policies: std::sync::Arc<arc_swap::ArcSwap<ratekeeper::domain::PolicySet>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestApp {
    pub async fn spawn(settings: Settings) -> TestApp {
        Self::from_app(Application::build(settings).await.expect("app builds")).await
    }

    pub async fn spawn_with(settings: Settings, backend: Backend, probe: Duration) -> TestApp {
        Self::from_app(
            Application::build_with(settings, backend, probe)
                .await
                .expect("app builds"),
        )
        .await
    }

    async fn from_app(app: Application) -> TestApp {
        let base = format!("http://{}", app.local_addr());
        let policies = app.policies();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        TestApp {
            base,
            http: reqwest::Client::new(),
            policies,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A client for a service that runs elsewhere (a container), at `base`
    /// (`http://host:port`); [`stop`](Self::stop) does nothing to it.
    pub fn remote(base: String) -> TestApp {
        TestApp {
            base,
            http: reqwest::Client::new(),
            policies: std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(
                ratekeeper::domain::PolicySet::empty(),
            )),
            stop: None,
            task: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs a check and returns (status, body).
    pub async fn check(&self, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.post("/v1/check", &body).await
    }

    /// POSTs `body` as JSON to `path`: the status and the JSON answer.
    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let response = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    /// The value of one series of `/metrics` (name and labels exactly as
    /// exposed); 0 when it is absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.get("/metrics").await.text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.parse().unwrap())
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
