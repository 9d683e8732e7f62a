use std::sync::Arc;
use std::time::{Duration, Instant};

use super::InFlight;

#[tokio::test]
async fn room_is_given_up_to_the_cap_and_waited_for_past_it() {
    let in_flight = InFlight::new(2);
    // A call larger than the cap takes all of it rather than never going.
    let big = in_flight
        .admit(3, Duration::ZERO)
        .await
        .expect("alone, it goes");
    let started = Instant::now();
    assert!(
        in_flight
            .admit(1, Duration::from_millis(50))
            .await
            .is_none()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "it waited before refusing"
    );
    drop(big);
    let one = in_flight
        .admit(1, Duration::ZERO)
        .await
        .expect("room again");
    let two = in_flight
        .admit(1, Duration::ZERO)
        .await
        .expect("the second unit");
    assert!(in_flight.admit(1, Duration::ZERO).await.is_none());
    drop((one, two));
}

#[tokio::test]
async fn a_waiting_call_goes_as_soon_as_room_frees() {
    let in_flight = Arc::new(InFlight::new(1));
    let held = in_flight.admit(1, Duration::ZERO).await.unwrap();
    let waiter = {
        let in_flight = in_flight.clone();
        tokio::spawn(async move { in_flight.admit(1, Duration::from_secs(5)).await.is_some() })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(held);
    assert!(waiter.await.unwrap());
}

#[tokio::test]
async fn the_cap_can_be_raised_and_lowered() {
    let in_flight = InFlight::new(1);
    in_flight.set_cap(3);
    let three = in_flight
        .admit(3, Duration::ZERO)
        .await
        .expect("raised to 3");
    drop(three);
    in_flight.set_cap(2);
    let two = in_flight
        .admit(5, Duration::ZERO)
        .await
        .expect("clamped to the cap");
    assert!(in_flight.admit(1, Duration::ZERO).await.is_none());
    drop(two);
}
