/**
 * Spring Boot auto-configuration for pathlock: a {@link io.pathlock.spring.PathLockTemplate} (a
 * {@link io.pathlock.PathLocks} handle per project) on the application's Spring Data Redis
 * Lettuce client, bound to the {@code pathlock.*} properties; Micrometer meters; an Actuator health
 * indicator that checks the module is loaded; and {@link io.pathlock.Busy} as HTTP 409 problem
 * details in Spring MVC.
 */
package io.pathlock.spring;
