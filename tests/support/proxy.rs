//! A TCP proxy in front of the API server that a test can cut: a replica whose kubeconfig
//! points here is partitioned from the API server at will (its own process, metrics and logs
//! go on).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct Proxy {
    /// `127.0.0.1:port`: the same address as the server's (its certificate names it), another port.
    pub addr: String,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Forwards every connection to `upstream` (`host:port`) until cut.
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (cut, open) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (accepting_cut, accepting_open, upstream) = (cut.clone(), open.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if accepting_cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let mut open = accepting_open.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Proxy { addr, cut, open }
    }

    /// From now on nothing gets through: open connections are closed, new ones refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A copy of the kubeconfig at `kubeconfig` whose server is this proxy, written into `dir`.
    pub fn kubeconfig(&self, kubeconfig: &str, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let server = text.lines().find_map(|l| l.trim().strip_prefix("server: ")).expect("a server in the kubeconfig");
        let upstream = server.trim().trim_start_matches("https://");
        let path = dir.join(format!("proxied-{}.kubeconfig", self.addr.replace([':', '.'], "-")));
        std::fs::write(&path, text.replace(upstream, &self.addr)).unwrap();
        path
    }
}

/// The `host:port` of the server a kubeconfig names.
pub fn server_of(kubeconfig: &str) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let server = text.lines().find_map(|l| l.trim().strip_prefix("server: ")).expect("a server in the kubeconfig");
    server.trim().trim_start_matches("https://").trim_end_matches('/').to_string()
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buffer) {
            if n == 0 || to.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
