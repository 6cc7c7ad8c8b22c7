//! A TCP proxy between the client and a real server, to break the connection at chosen moments:
//! refuse new connections, cut the open ones, cut one right after the server granted an
//! `ACQUIRE` (so its reply is lost), cut one instead of passing on a `PATHLOCK.CHECK`, or delay
//! what the client sends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Pass everything through.
    Forward,
    /// Close every new connection at once.
    Refuse,
    /// Pass through until the client sends a `PATHLOCK.ACQUIRE`; then close that connection
    /// instead of delivering the server's reply, and behave as `then` from there on.
    CutAfterAcquire { then: After },
    /// Pass through, except a chunk with a `PATHLOCK.CHECK`: close that connection instead of
    /// sending it on, so that the check fails with a connection error and nothing else does.
    CutOnCheck,
    /// Hold each chunk the client sends for this long before passing it on.
    Delay(Duration),
}

/// What the proxy does after a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    Forward,
    Refuse,
}

struct State {
    behaviour: Mutex<Behaviour>,
    /// Bumped to close every open connection.
    cuts: watch::Sender<u64>,
}

impl State {
    fn behaviour(&self) -> Behaviour {
        *self.behaviour.lock().expect("proxy state")
    }

    fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().expect("proxy state") = behaviour;
    }
}

pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of `upstream`, forwarding.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            behaviour: Mutex::new(Behaviour::Forward),
            cuts: watch::Sender::new(0),
        });
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if shared.behaviour() == Behaviour::Refuse {
                    drop(client);
                    continue;
                }
                tokio::spawn(serve(client, upstream, shared.clone()));
            }
        });
        Proxy { port, state, task }
    }

    pub fn set(&self, behaviour: Behaviour) {
        self.state.set(behaviour);
    }

    /// Closes every open connection.
    pub fn cut(&self) {
        self.state.cuts.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

async fn serve(client: TcpStream, upstream: u16, state: Arc<State>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut cuts = state.cuts.subscribe();
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let acquire_sent = watch::Sender::new(None::<After>);
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            match state.behaviour() {
                Behaviour::Delay(delay) => tokio::time::sleep(delay).await,
                Behaviour::CutAfterAcquire { then } if contains(&buf[..n], b"PATHLOCK.ACQUIRE") => {
                    acquire_sent.send_replace(Some(then));
                }
                Behaviour::CutOnCheck if contains(&buf[..n], b"PATHLOCK.CHECK") => return,
                _ => {}
            }
            if to_server.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if let Some(then) = *acquire_sent.borrow() {
                // The server has answered the ACQUIRE: lose the answer with the connection.
                state.set(match then {
                    After::Forward => Behaviour::Forward,
                    After::Refuse => Behaviour::Refuse,
                });
                return;
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cuts.changed() => {}
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
